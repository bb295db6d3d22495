# Source: xinge008/Cylinder3D, train_cylinder_asym.py and network/cylinder_spconv_3d.py
# Report: https://github.com/xinge008/Cylinder3D/issues/58
# Cylinder3D LiDAR segmentation: point features are scattered into a cylindrical voxel grid
# whose batch dimension is the batch_size argument of the model. The sparse-conv U-Net is
# replaced by dense 2D convs on a small (rho, phi) grid; synthetic point clouds.
import torch
import torch.nn as nn
import torch.nn.functional as F


class cylinder_asym(nn.Module):
    def __init__(self, grid_size=(16, 16), fea_dim=4, num_class=5):
        super().__init__()
        self.grid_size = grid_size
        self.cylinder_3d_generator = nn.Sequential(nn.Linear(fea_dim, 16), nn.ReLU(), nn.Linear(16, 16))
        self.cylinder_3d_spconv_seg = nn.Sequential(nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, num_class, 1))

    def forward(self, train_pt_fea_ten, train_vox_ten, batch_size):
        coords, features_3d = [], []
        for b, (fea, vox) in enumerate(zip(train_pt_fea_ten, train_vox_ten)):
            coords.append(F.pad(vox, (1, 0), value=b))
            features_3d.append(self.cylinder_3d_generator(fea))
        coords = torch.cat(coords)
        features_3d = torch.cat(features_3d)
        dense = features_3d.new_zeros(batch_size, self.grid_size[0], self.grid_size[1], features_3d.size(1))
        dense = dense.index_put((coords[:, 0], coords[:, 1], coords[:, 2]), features_3d, accumulate=True)
        return self.cylinder_3d_spconv_seg(dense.permute(0, 3, 1, 2))


def make_scan(gen, n_points=300, grid=16):
    vox = torch.randint(0, grid, (n_points, 2), generator=gen)
    label = (vox[:, 0] // 4 + vox[:, 1] // 8) % 5
    fea = torch.cat([vox.float() / grid, torch.nn.functional.one_hot(label, 5)[:, :2].float()], 1)
    voxel_label = torch.zeros(grid, grid, dtype=torch.long)
    voxel_label[vox[:, 0], vox[:, 1]] = label
    return fea, vox, voxel_label


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train_scans = [make_scan(gen) for _ in range(24)]
    val_scans = [make_scan(gen) for _ in range(8)]
    train_batch_size, val_batch_size = 4, 6
    my_model = cylinder_asym()
    optimizer = torch.optim.Adam(my_model.parameters(), lr=3e-3)
    loss_func = nn.CrossEntropyLoss(ignore_index=0)
    for epoch in range(3):
        my_model.train()
        for i in range(0, len(train_scans), train_batch_size):
            batch = train_scans[i:i + train_batch_size]
            train_pt_fea_ten = [b[0] for b in batch]
            train_vox_ten = [b[1] for b in batch]
            point_label_tensor = torch.stack([b[2] for b in batch])
            outputs = my_model(train_pt_fea_ten, train_vox_ten, train_batch_size)
            loss = loss_func(outputs, point_label_tensor)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        my_model.eval()
        val_loss_list, correct, total = [], 0, 0
        with torch.no_grad():
            for i in range(0, len(val_scans), val_batch_size):
                batch = val_scans[i:i + val_batch_size]
                val_pt_fea_ten = [b[0] for b in batch]
                val_grid_ten = [b[1] for b in batch]
                val_label_tensor = torch.stack([b[2] for b in batch])
                predict_labels = my_model(val_pt_fea_ten, val_grid_ten, val_batch_size)
                val_loss_list.append(loss_func(predict_labels, val_label_tensor).item())
                keep = val_label_tensor > 0
                correct += (predict_labels.argmax(1)[keep] == val_label_tensor[keep]).sum().item()
                total += keep.sum().item()
        print("epoch %d train loss %.4f val loss %.4f val acc %.3f" % (epoch, loss.item(), sum(val_loss_list) / len(val_loss_list), correct / total))


if __name__ == "__main__":
    main()
