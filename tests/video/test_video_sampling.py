"""Frame sampling specs: canonical text round trips, target timestamps, clear errors."""

from __future__ import annotations

import numpy as np
import pytest

from capeval.engine.frames.sampling import FPS, FrameSpec, FrameSpecError, Segments, Uniform


@pytest.mark.parametrize(
    "text, spec",
    [
        ("uniform:32", Uniform(32)),
        ("fps:0.4", FPS(0.4)),
        ("fps:1,max=64", FPS(1.0, 64)),
        ("segments:length=60,per=4", Segments(4, length_s=60.0)),
        ("segments:at=12.5|40,per=2", Segments(2, boundaries=(12.5, 40.0))),
    ],
)
def test_canonical_text_round_trips(text, spec):
    assert FrameSpec.parse(text) == spec
    assert str(spec) == text
    assert FrameSpec.parse(str(spec)) == spec


def test_uniform_takes_segment_centres():
    t = FrameSpec.parse("uniform:4").timestamps(8.0)
    np.testing.assert_allclose(t, [1.0, 3.0, 5.0, 7.0])


def test_fps_spacing_and_cap():
    t = FrameSpec.parse("fps:0.4").timestamps(100.0)  # one frame per 2.5 s, at interval centres
    assert len(t) == 40
    np.testing.assert_allclose(np.diff(t), 2.5)
    assert t[0] == pytest.approx(1.25) and t[-1] < 100.0
    capped = FrameSpec.parse("fps:1,max=8").timestamps(100.0)  # 100 frames > 8: falls back to 8 uniform
    np.testing.assert_allclose(capped, FrameSpec.parse("uniform:8").timestamps(100.0))
    assert len(FrameSpec.parse("fps:1").timestamps(0.3)) == 1  # a clip shorter than one interval still gives a frame


def test_segments_by_length_and_boundaries():
    t = FrameSpec.parse("segments:length=60,per=2").timestamps(150.0)  # segments [0,60) [60,120) [120,150)
    np.testing.assert_allclose(t, [15, 45, 75, 105, 127.5, 142.5])
    t = FrameSpec.parse("segments:at=10|40|99,per=1").timestamps(50.0)  # the boundary past the end is dropped
    np.testing.assert_allclose(t, [5, 25, 45])


@pytest.mark.parametrize(
    "bad, fragment",
    [
        ("uniform", "expected KIND:ARGS"),
        ("uniform:0", "positive integer"),
        ("uniform:abc", "'abc' is not an integer"),
        ("fps:-1", "positive number"),
        ("fps:1,cap=3", "unexpected 'cap=3'"),
        ("segments:per=2", "exactly one of"),
        ("segments:length=5", "needs per=N"),
        ("frames:8", "unknown kind 'frames'"),
    ],
)
def test_bad_specs_name_the_problem(bad, fragment):
    with pytest.raises(FrameSpecError) as exc:
        FrameSpec.parse(bad)
    assert fragment in str(exc.value) and bad in str(exc.value)


def test_bad_duration_is_an_error():
    with pytest.raises(FrameSpecError, match="duration"):
        FrameSpec.parse("uniform:8").timestamps(0.0)


def test_keyframe_snap_text_and_reach():
    spec = FrameSpec.parse("uniform:4,snap=key")
    assert str(spec) == "uniform:4,snap=key" and spec.spec == Uniform(4)
    targets = spec.timestamps(8.0)  # 1, 3, 5, 7: reach 1 s each
    snapped = spec.snap(targets, np.array([0.0, 2.5, 4.0, 6.5]), 8.0)
    # 1 -> 0 (within 1), 3 -> 2.5, 5 -> 4.0 (tie with 6.5? no: 4.0 is 1.0 away, 6.5 is 1.5), 7 -> 6.5
    np.testing.assert_allclose(snapped, [0.0, 2.5, 4.0, 6.5])
    far = spec.snap(targets, np.array([0.0, 4.9]), 8.0)  # 3 and 7 have no keyframe within 1 s
    np.testing.assert_allclose(far, [0.0, 3.0, 4.9, 7.0])


@pytest.mark.parametrize("text", ["uniform:8", "fps:1,max=64", "segments:length=60,per=4", "linspace:32",
                                  "uniform:4,snap=key"])
def test_every_kind_is_a_frame_spec_parsed_only_from_text(text):
    spec = FrameSpec.parse(text)
    assert isinstance(spec, FrameSpec) and str(spec) == text
    with pytest.raises(FrameSpecError, match="must be text"):
        FrameSpec.parse(spec)  # a value is passed on as it is, never parsed again
