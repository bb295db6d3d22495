"""English: each split's label encoding (the data ledger, `_ledger/_encoding.py`) and samples
that repeat across DataLoader workers (`_ledger/_workers.py`)."""

MESSAGES = {
    "ledger.encoding.message":
        "evaluation loader {eval} and training loader {train} encode labels differently: {count} class(es) "
        "have another index in the evaluation dataset's {attr} ({shown}); {wrong} of {n} evaluation samples "
        "carry a label that training uses for another class (checked on {checked})",
    "ledger.encoding_missing.cause":
        "each dataset built its own {attr} from the classes it found: the evaluation split lacks {missing}, "
        "so every later class moved down by one index, and the model's prediction of the right class is scored "
        "as wrong",
    "ledger.encoding_extra.cause":
        "each dataset built its own {attr} from the classes it found: the evaluation split holds classes "
        "training never saw ({extra}), which take the indices of training classes",
    "ledger.encoding_order.cause":
        "each dataset built its own {attr}, and the two orders differ: the same index names another class "
        "in training and in evaluation",
    "ledger.encoding_missing.next":
        "build the evaluation dataset with the training dataset's classes (ImageFolder(root, ...) reads "
        "find_classes; pass or remap to train_ds.class_to_idx), or map its labels by class name to the "
        "training indices",
    "ledger.encoding_extra.next":
        "build the evaluation dataset with the training dataset's classes, and drop or report the classes "
        "training never saw",
    "ledger.encoding_order.next":
        "build the encoding once, from the training split (or a fixed class list), and give it to every split",
    "ledger.workers.message":
        "{repeated} of {n} samples ({share}) that loader {loader} delivered in its first {batches} batches are "
        "identical to the sample at the same position of another worker's batch of the same round, for another "
        "index: its {workers} workers produce the same samples",
    "ledger.workers_generator.cause":
        "the dataset draws from random generators it holds ({generators}); each worker process gets a copy of "
        "the dataset with the same generator state, so every worker draws the same numbers (PyTorch reseeds "
        "torch, random and numpy's global generator per worker, not a generator object the dataset holds): "
        "each epoch trains on 1/{workers} of the distinct samples it delivers",
    "ledger.workers_generator.next":
        "give the DataLoader a worker_init_fn that reseeds the dataset's generators from "
        "torch.utils.data.get_worker_info().seed (or draw from np.random / torch's global generator, which "
        "PyTorch seeds per worker)",
    "ledger.workers_same.cause":
        "every worker starts from the same random state (a worker_init_fn that seeds each worker with one "
        "constant, a generator the dataset holds) or iterates the same stream in full (an IterableDataset that "
        "does not split its data by get_worker_info()), so the workers deliver the same samples",
    "ledger.workers_same.next":
        "seed each worker from torch.utils.data.get_worker_info().seed (or its id), and shard an "
        "IterableDataset's stream by worker id",
    "ledger.eval_random.message":
        "evaluation loader {loader} delivered other inputs for {changed} of {n} samples ({share}) in its second "
        "pass than in its first: its evaluation is random",
    "ledger.eval_random.cause":
        "the evaluation samples are read through a dataset whose transform draws at random (a validation split "
        "made by a sampler or Subset over the augmented training dataset keeps its random crops and flips), so "
        "each pass measures other augmented views: the per-epoch metric that picks the best model is partly "
        "augmentation noise, on inputs of the training distribution",
    "ledger.eval_random.next":
        "build the evaluation split from a dataset with the evaluation transform (the same files or indices, "
        "transform=test_transform), and keep random augmentation to the training loader",
    "ledger.eval_random.transform.message":
        "evaluation loader {loader} delivered other inputs for {changed} of {n} samples ({share}) in its second "
        "pass than in its first{weights}: its dataset applies {transform} at {applied}, which draws at random, so "
        "every evaluation scores another random draw of the data",
    "ledger.eval_random.transform.cause":
        "the evaluation pipeline holds a random transform (a random crop, flip, jitter or noise meant for "
        "training): an evaluation is no longer a function of the weights, the same weights scored twice give "
        "different scores, and the best epoch is picked partly on the draw",
    "ledger.eval_random.transform.next":
        "use deterministic evaluation transforms (Resize / CenterCrop instead of RandomResizedCrop / RandomCrop, "
        "no flips or noise); for test-time augmentation on purpose, average several draws per sample with a fixed "
        "generator",
    "ledger.eval_random.same_weights.message":
        "evaluation loader {loader} delivered other inputs for {changed} of {n} samples ({share}) in two passes "
        "over the same weights (no update between them): its evaluation is random",
    "ledger.eval_random.same_weights.cause":
        "the evaluation samples are read through a dataset that draws at random: the same weights evaluated twice "
        "get different inputs, so the score is a random draw and not a measure of the model",
    "ledger.eval_random.same_weights.next":
        "make the evaluation dataset deterministic (no random transform, a fixed generator for any sampling it "
        "does), and compare two evaluations of one checkpoint: they must agree",
}
