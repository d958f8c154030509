"""examples/lightning_train.py under the real Lightning: epochs, steps, mid-epoch resume."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

L = pytest.importorskip("lightning", reason="lightning is in the test extras")

ROOT = Path(__file__).resolve().parents[1]

pytestmark = [
    # Lightning 2.6 itself calls torch.utils._pytree.LeafSpec, which torch >= 2.9
    # deprecates; nothing in dataio or the example triggers it
    pytest.mark.filterwarnings("ignore:`isinstance\\(treespec, LeafSpec\\)` is deprecated"),
]


def example() -> Any:
    spec = importlib.util.spec_from_file_location(
        "lightning_train", ROOT / "examples" / "lightning_train.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["lightning_train"] = module
    spec.loader.exec_module(module)
    return module


TRAIN, VAL, BATCH = 40, 12, 4


def fit(module: Any, **options: Any) -> tuple[Any, Any, Any]:
    torch.manual_seed(0)
    data = module.DataioDataModule(module.make_records(TRAIN), module.make_records(VAL, seed=1))
    model = module.Classifier()
    trainer = module.trainer(**options.pop("trainer", {}))
    trainer.fit(model, datamodule=data, **options)
    return trainer, model, data


def test_three_epochs_take_three_times_the_batches_of_one() -> None:
    module = example()
    trainer, model, _ = fit(module)
    per_epoch = -(-TRAIN // BATCH)
    assert trainer.current_epoch == 3
    assert trainer.global_step == 3 * per_epoch == len(model.seen)
    for epoch in range(3):  # every epoch sees every record once
        keys = [
            k for batch in model.seen[epoch * per_epoch : (epoch + 1) * per_epoch] for k in batch
        ]
        assert sorted(keys) == list(range(TRAIN))
    assert len(model.val_losses) == 3
    assert model.val_losses[-1] < model.val_losses[0]  # it learns


class SaveAt(L.Callback):
    """Write a checkpoint after global step ``step``, mid-epoch, as ModelCheckpoint would."""

    def __init__(self, step: int, path: Path) -> None:
        self.step = step
        self.path = path

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def test_a_mid_epoch_checkpoint_resumes_at_the_next_sample(tmp_path: Path) -> None:
    module = example()
    checkpoint = tmp_path / "mid.ckpt"
    step = 13  # epoch 1, batch 3 of 10
    _, full, _ = fit(module, trainer={"callbacks": [SaveAt(step, checkpoint)]})
    assert checkpoint.exists()

    saved = torch.load(checkpoint, weights_only=False)
    position = saved["DataioDataModule"]["train"]
    assert position["epoch"] == 1 and position["samples_consumed"] == 3 * BATCH

    trainer, resumed, _ = fit(module, ckpt_path=str(checkpoint))
    assert trainer.global_step == len(full.seen)
    assert resumed.seen == full.seen[step:]
