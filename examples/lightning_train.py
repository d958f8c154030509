"""Lightning training on dataio loaders: a DataModule, a tiny model, three CPU epochs.

The DataModule's train and validation loaders are ``dataio.DataLoader`` objects. Their
batches are ``dataio.Batch`` mappings, which Lightning moves to the model's device
whole (``Batch.to``). The DataModule checkpoints the training loader's position, so a
run restored from a mid-epoch Lightning checkpoint continues at the right sample.
"""

from __future__ import annotations

import io
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

import dataio

FEATURES, CLASSES = 8, 3


def make_records(n: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` records: an NPY-encoded feature vector, an integer class and a key."""
    centers = np.random.default_rng(0).normal(size=(CLASSES, FEATURES)).astype(np.float32)
    rng = np.random.default_rng(seed + 1)  # train and validation share the classes
    records = []
    for i in range(n):
        label = i % CLASSES
        buffer = io.BytesIO()
        np.save(buffer, centers[label] + rng.normal(size=FEATURES).astype(np.float32))
        records.append({"key": i, "features": buffer.getvalue(), "label": label})
    return records


PIPELINE = dataio.pipeline(
    dataio.slot("features").decode_numpy(),
    dataio.slot("label").passthrough(),  # Python ints: an int64 tensor
    dataio.batch(4),
)


class DataioDataModule(L.LightningDataModule):
    """Train and validation ``dataio.DataLoader`` objects; the train position is saved."""

    def __init__(self, train: list[dict[str, Any]], val: list[dict[str, Any]], seed: int = 0):
        super().__init__()
        self.train_records = dataio.records(train).shuffle(seed=seed)
        self.val_records = val
        self.seed = seed
        self.train_loader: dataio.DataLoader | None = None
        self._restored: dict[str, Any] | None = None

    def train_dataloader(self) -> dataio.DataLoader:
        if self.train_loader is None:
            self.train_loader = dataio.DataLoader(
                PIPELINE, self.train_records, output="torch", seed=self.seed
            )
        if self._restored is not None:
            self.train_loader.load_state_dict(self._restored)
            self._restored = None
        return self.train_loader

    def val_dataloader(self) -> dataio.DataLoader:
        return dataio.DataLoader(PIPELINE, self.val_records, output="torch")

    def state_dict(self) -> dict[str, Any]:
        # Lightning calls this when it writes a checkpoint
        return {} if self.train_loader is None else {"train": self.train_loader.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # called before train_dataloader() on a restore: keep it for the loader
        self._restored = state_dict.get("train")


class Classifier(L.LightningModule):
    """A linear classifier; ``seen`` records the record keys of every training batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(FEATURES, CLASSES)
        self.seen: list[list[int]] = []
        self.val_losses: list[float] = []  # mean per validation pass
        self._batch_losses: list[float] = []

    def training_step(self, batch: dataio.Batch, batch_idx: int) -> torch.Tensor:
        self.seen.append(list(batch.row_keys))
        return F.cross_entropy(self.layer(batch["features"]), batch["label"])

    def validation_step(self, batch: dataio.Batch, batch_idx: int) -> None:
        loss = F.cross_entropy(self.layer(batch["features"]), batch["label"])
        self._batch_losses.append(float(loss))

    def on_validation_epoch_end(self) -> None:
        if self._batch_losses:
            self.val_losses.append(sum(self._batch_losses) / len(self._batch_losses))
        self._batch_losses = []

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def trainer(**options: Any) -> L.Trainer:
    """A quiet CPU trainer for three epochs."""
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 3,
        "logger": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "enable_checkpointing": False,
        "num_sanity_val_steps": 0,
    }
    settings.update(options)
    return L.Trainer(**settings)


def main() -> None:
    torch.manual_seed(0)
    data = DataioDataModule(make_records(40), make_records(12, seed=1))
    model = Classifier()
    fit = trainer()
    fit.fit(model, datamodule=data)
    print(f"{fit.global_step} steps over {fit.current_epoch} epochs")
    print(f"validation loss: first {model.val_losses[0]:.3f}, last {model.val_losses[-1]:.3f}")


if __name__ == "__main__":
    main()
