"""A dense target that does not line up with its input: a geometric augmentation applied to the
image only (`data.target_misaligned`, `_silent/_pairing.py`)."""

from __future__ import annotations

import pytest
import torch

from _lines import line_in, run_watched
from torchtriage import Severity, Stage
from zoo import pairing as z

ZOO = z.__file__
CODE = "data.target_misaligned"


def _line(text: str) -> int:
    return line_in(ZOO, text, unique=True)


_run = run_watched


def test_a_horizontal_flip_of_the_image_only_is_found():
    report = _run(z.hflip_image_only, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert (f.severity, f.stage, f.line) == (Severity.WARNING, Stage.DATA, _line("# the loss line"))
    ev = f.evidence
    assert ev["most_common_transform"] == "horizontal flip"
    assert ev["samples_aligned_as_given"] >= 2  # the samples the random flip left alone
    assert ev["samples_misaligned"] >= 4 and ev["samples_measured"] == 16
    assert ev["explained_variance_moved"] > ev["explained_variance_given"] + 0.1
    assert f.message.startswith("the dense target (mask / map) of ")
    assert "horizontal flip" in f.message


def test_a_rotation_of_the_image_only_with_the_loss_inside_forward_is_found():
    report = _run(z.rotate_image_only, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert f.line == _line("# the inner loss line")
    assert "rotation" in f.evidence["most_common_transform"]


def test_a_depth_map_left_in_place_while_the_image_is_cropped_is_found():
    report = _run(z.crop_image_only, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    assert "shift" in found[0].evidence["most_common_transform"]


def test_every_image_upside_down_is_found_by_the_orientation_all_samples_agree_on():
    report = _run(z.upside_down_images, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    ev = found[0].evidence
    assert "vertical flip" in ev["most_common_transform"]
    assert ev["samples_aligned_as_given"] == 0
    assert ev["samples_with_one_orientation"] >= 0.75 * ev["samples_misaligned"]


@pytest.mark.parametrize("make", [z.crop_per_key, z.translate_apart])
def test_a_random_crop_drawn_apart_for_image_and_target_is_found(make):
    """One draw per key (rising's RandomCrop before its fix): every sample's target is displaced
    by its own offset, no one transform for all; one shift per sample restores it."""
    report = _run(make, True)
    found = report.filter(code=CODE)
    assert len(found) == 1, [(f.code, f.line) for f in report.findings]
    f = found[0]
    assert f.severity is Severity.WARNING and "shift" in f.evidence["most_common_transform"]
    if make is z.crop_per_key:  # (offsets up to half the side: no shift of the list fits them)
        ev = f.evidence
        assert "random crop" in f.message and f.line == _line("# the per-key crop loss line")
        assert ev["second_peak_share"] <= 0.5 and ev["samples_misaligned"] >= 0.5 * ev["samples_measured"]


@pytest.mark.parametrize("make", [z.hflip_image_only, z.rotate_image_only, z.crop_image_only,
                                  z.upside_down_images, z.crop_per_key, z.translate_apart])
def test_the_transform_applied_to_both_is_quiet(make):
    report = _run(make, False)
    assert not report.filter(code=CODE), [(f.code, f.evidence) for f in report.filter(code=CODE)]


@pytest.mark.parametrize("make", [z.denoising_autoencoder, z.masked_autoencoder, z.symmetric_scenes_flipped_alone,
                                  z.critic_then_reconstruction, z.lensless_reconstruction, z.lensless_segmentation])
def test_correct_dense_targets_are_quiet(make):
    report = _run(make)
    assert not report.filter(code=CODE), [(f.code, f.evidence) for f in report.filter(code=CODE)]


def test_a_call_that_took_the_prediction_as_its_input_is_not_the_input_of_the_target():
    """A critic (or any second model) scoring the prediction: its argument is the prediction
    itself, or a detached view of it, not an input the target is a map of."""
    from torchtriage._silent._pairing import dense_input

    tgt = torch.rand(8, 1, 16, 16)
    image = torch.rand(8, 3, 16, 16)
    pred = torch.rand(8, 1, 16, 16, requires_grad=True)
    assert dense_input(tgt, (image,), {}, pred) is image  # the model that made the prediction
    assert dense_input(tgt, (pred, torch.rand(8, 5)), {}, pred) is None
    assert dense_input(tgt, (pred.detach(),), {}, pred) is None
    assert dense_input(tgt, (), {"x": pred[:, :1]}, pred) is None
