"""Knowledge distillation tutorial: a deeper teacher trained first with CrossEntropyLoss, then a
light student trained with the teacher in eval() under no_grad, soft targets softmax(T) against
log_softmax(T) scaled by T**2 (the tutorial's sum / batch form), mixed with the hard-label loss;
test() in eval() with argmax accuracy.

Source: pytorch/tutorials, beginner_source/knowledge_distillation_tutorial.py,
commit c53e7d4efc0e39e455c531d21ec7db28ba220214.
Reduced: 8x8 images, tiny conv nets with dropout, 2 batches, 1 epoch each.

Mutation: the student's forward indented into the teacher's `with torch.no_grad():` block: the distillation loss has no graph.
Expected: error gradient.loss_no_grad_fn (cut by no_grad) at the student's forward `student_logits = student(inputs)`.
"""

import torch
import torch.nn as nn
import torch.optim as optim


class DeepNN(nn.Module):
    def __init__(self, num_classes=10):
        super(DeepNN, self).__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
                                      nn.MaxPool2d(2, 2), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.classifier = nn.Sequential(nn.Linear(8 * 2 * 2, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


class LightNN(nn.Module):
    def __init__(self, num_classes=10):
        super(LightNN, self).__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2),
                                      nn.Conv2d(4, 4, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2, 2))
        self.classifier = nn.Sequential(nn.Linear(4 * 2 * 2, 8), nn.ReLU(), nn.Dropout(0.1), nn.Linear(8, num_classes))

    def forward(self, x):
        x = self.features(x)
        x = torch.flatten(x, 1)
        return self.classifier(x)


def build():
    torch.manual_seed(42)
    train_loader = [(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))) for _ in range(2)]
    test_loader = [(torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,)))]
    teacher, student = DeepNN(), LightNN()
    opt_teacher = optim.Adam(teacher.parameters(), lr=1e-3)
    opt_student = optim.Adam(student.parameters(), lr=1e-3)
    ce_loss = nn.CrossEntropyLoss()

    def train_plain(model, optimizer, epochs):
        model.train()
        for epoch in range(epochs):
            running_loss = 0.0
            for inputs, labels in train_loader:
                optimizer.zero_grad()
                outputs = model(inputs)
                loss = ce_loss(outputs, labels)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()

    def test(model):
        model.eval()
        correct = total = 0
        with torch.no_grad():
            for inputs, labels in test_loader:
                outputs = model(inputs)
                _, predicted = torch.max(outputs.data, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        return 100 * correct / total

    def train_knowledge_distillation(epochs, T, soft_target_loss_weight, ce_loss_weight):
        teacher.eval()
        student.train()
        for epoch in range(epochs):
            for inputs, labels in train_loader:
                opt_student.zero_grad()
                with torch.no_grad():
                    teacher_logits = teacher(inputs)
                    student_logits = student(inputs)  # <- bug
                soft_targets = nn.functional.softmax(teacher_logits / T, dim=-1)
                soft_prob = nn.functional.log_softmax(student_logits / T, dim=-1)
                soft_targets_loss = torch.sum(soft_targets * (soft_targets.log() - soft_prob)) / soft_prob.size()[0] * (T ** 2)
                label_loss = ce_loss(student_logits, labels)
                loss = soft_target_loss_weight * soft_targets_loss + ce_loss_weight * label_loss
                loss.backward()
                opt_student.step()

    def train():
        train_plain(teacher, opt_teacher, 1)
        test(teacher)
        train_knowledge_distillation(1, T=2, soft_target_loss_weight=0.25, ce_loss_weight=0.75)
        return test(student)

    return [teacher, student], [opt_teacher, opt_student], train


if __name__ == "__main__":
    build()[2]()
