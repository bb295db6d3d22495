"""A quiet, tiny Lightning Trainer for the corpus loops: CPU, no logger, no checkpoint files, no
progress bar or model summary, a few batches."""


def trainer(**kw):
    import lightning.pytorch as pl

    args = dict(accelerator="cpu", devices=1, max_epochs=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                limit_train_batches=3, limit_val_batches=1)
    args.update(kw)
    return pl.Trainer(**args)
