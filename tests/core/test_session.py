"""The headless session model (core.session) and what it remembers (core.last_session): events,
the generation check, the last session and recent models, and hostile settings text."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from dmlviewer.core.display import DisplayOptions
from dmlviewer.core.models.source import ModelSource
from dmlviewer.core.last_session import LastSession, add_recent_source, recent_sources
from dmlviewer.core.session import Session, SessionError, Stamp


def _dataset(n: int = 4):
    return SimpleNamespace(paths=[f"c{i}/img{i}.jpg" for i in range(n)])


def _record(session: Session) -> dict[str, list]:
    heard: dict[str, list] = {name: [] for name in ("dataset", "model", "pair", "features", "device", "jobs",
                                                    "pinned")}
    for name, calls in heard.items():
        getattr(session.events, name).connect(lambda *args, c=calls: c.append(args))
    return heard


def test_each_change_fires_its_event_once(tmp_path):
    s = Session()
    heard = _record(s)
    s.set_dataset(_dataset(), str(tmp_path), "cub")
    s.set_pair(1, 2)
    s.set_pair(1, 2)  # no change: no event
    s.set_model(object(), {"sha256": "a" * 64}, ModelSource("pretrained", path="imagenet:resnet18"))
    s.set_features("F", str(tmp_path / "f.h5"))
    s.set_features("F", str(tmp_path / "f.h5"))
    s.set_device("cpu")  # already
    s.set_device("cuda:0")
    assert {k: len(v) for k, v in heard.items()} == {"dataset": 1, "model": 1, "pair": 1, "features": 1, "device": 1,
                                                     "jobs": 0, "pinned": 0}
    assert heard["model"] == [("primary",)]
    # A new dataset clears the pair (its indices were the old dataset's), said once.
    s.set_dataset(_dataset(), str(tmp_path), None)
    assert (s.query_index, s.reference_index) == (None, None)
    assert len(heard["dataset"]) == 2 and len(heard["pair"]) == 2
    s.set_model(None, slot="compare")  # an empty slot emptied: nothing changed
    assert len(heard["model"]) == 1
    with pytest.raises(ValueError, match="slot"):
        s.set_model(object(), {}, slot="third")


def test_results_of_a_closed_dataset_or_model_are_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    s = Session()
    s.set_dataset(_dataset(), str(tmp_path / "a"))
    s.set_model(object(), {"sha256": "1" * 64})
    stamp = s.stamp()
    assert s.accepts(stamp)
    generation = s.generation
    s.set_pair(0, 1)
    s.set_device("cuda:0")
    assert s.generation == generation and s.accepts(stamp)  # neither changes what results belong to

    s.set_dataset(_dataset(), str(tmp_path / "b"))  # another dataset: the old job's result is stale
    assert s.generation > generation and not s.accepts(stamp)
    s.set_dataset(_dataset(), str(tmp_path / "a"))  # the same folder and the same weights again
    assert s.accepts(stamp)
    s.set_model(object(), {"sha256": "2" * 64})  # another model
    assert not s.accepts(stamp)
    assert not s.accepts(None)
    # A job of the compare slot is judged by that slot's model.
    s.set_model(object(), {"sha256": "3" * 64}, slot="compare")
    compare = s.stamp("compare")
    s.set_model(object(), {"sha256": "4" * 64})
    assert not s.accepts(Stamp(0, compare.dataset, "1" * 64))  # the first primary model is gone
    assert s.accepts(compare)  # the compare model and dataset are still the same


@pytest.mark.parametrize("source", [
    ModelSource("checkpoint", path="/runs/a/checkpoint.pt"),
    ModelSource("pretrained", path="imagenet:efficientnet_lite0"),
    ModelSource("code", entry="/home/u/my_models.py:build", args={"depth": 18, "name": "x"},
                weights="/home/u/w.pth", options={"feature_layer": "layer4"}),
    ModelSource("code", entry="mypackage.models:Net"),
])
def test_the_last_session_round_trips_every_model_source(tmp_path, source):
    s = Session()
    s.set_dataset(_dataset(), str(tmp_path), "folder")
    s.set_model(object(), {"sha256": "a" * 64}, source)
    s.set_pair(2, 3)
    s.set_features(object(), str(tmp_path / "f.h5"))
    data = s.to_dict()
    text = json.dumps(data)  # settings hold it as text
    back = Session.from_dict(text)
    assert back == LastSession(str(tmp_path), "folder", {"primary": source}, "c2/img2.jpg", "c3/img3.jpg",
                               str(tmp_path / "f.h5"), DisplayOptions().to_dict())
    assert back.models["primary"].kind == source.kind  # imagenet: stays a pretrained backbone
    assert Session.from_dict(back.to_dict()) == back


def test_a_live_module_is_not_persisted_and_settings_of_older_versions_still_read(tmp_path):
    s = Session()
    s.set_model(object(), {"sha256": "a" * 64}, ModelSource("python", label="MyNet"))
    assert "models" not in s.to_dict()
    old = LastSession.from_settings({"dataset": str(tmp_path), "format": "", "checkpoint": "imagenet:resnet18",
                                     "query": "a.jpg", "features": ""})
    assert old.models["primary"] == ModelSource("pretrained", path="imagenet:resnet18")
    assert old.dataset == str(tmp_path) and old.format is None and old.query == "a.jpg" and old.features is None
    path = LastSession.from_settings({"checkpoint": str(tmp_path / "c.pt")})
    assert path.models["primary"] == ModelSource("checkpoint", path=str(tmp_path / "c.pt"))
    new = LastSession.from_settings({"last": json.dumps(s.to_dict()), "checkpoint": "/ignored.pt"})
    assert new.models == {}


def test_the_last_session_remembers_model_bs_feature_file_and_one_saved_without_it_still_reads(tmp_path):
    """Issue 41: model B's feature file (the compare slot's) is remembered beside model A's; a
    session saved before the key existed reads with none; a model B that is not remembered (a
    live module) takes its file with it."""
    from dataclasses import replace

    s = Session()
    s.set_dataset(_dataset(), str(tmp_path), "folder")
    a, b = ModelSource("checkpoint", path="/runs/a.pt"), ModelSource("checkpoint", path="/runs/b.pt")
    s.set_model(object(), {"sha256": "a" * 64}, a)
    s.set_model(object(), {"sha256": "b" * 64}, b, slot="compare")
    s.set_features(object(), str(tmp_path / "a.h5"))
    s.set_features(object(), str(tmp_path / "b.h5"), slot="compare")
    data = s.to_dict()
    assert (data["features"], data["compare_features"]) == (str(tmp_path / "a.h5"), str(tmp_path / "b.h5"))
    back = Session.from_dict(json.dumps(data))
    assert back == LastSession(str(tmp_path), "folder", {"primary": a, "compare": b}, None, None,
                               str(tmp_path / "a.h5"), DisplayOptions().to_dict(), str(tmp_path / "b.h5"))
    assert Session.from_dict(back.to_dict()) == back
    older = {key: value for key, value in data.items() if key != "compare_features"}
    assert Session.from_dict(json.dumps(older)) == replace(back, compare_features=None)
    assert LastSession.from_settings({"last": json.dumps(older)}).compare_features is None
    assert "compare_features" not in LastSession.from_settings({"last": json.dumps(older)}).to_dict()
    s.set_model(object(), {}, ModelSource("python", label="Live"), slot="compare")
    assert "compare_features" not in s.to_dict() and "compare" not in s.to_dict()["models"]


def test_reading_the_last_session_reopens_model_bs_file_only_while_it_exists_and_fits(tmp_path, monkeypatch, caplog):
    """Model B's remembered feature file is read beside model B when it still exists and fits the
    dataset and model B's checksum (the session's rule); otherwise it is left out with a log
    line, never an error."""
    import logging

    import dmlviewer.core.evaluate as evaluate
    from dmlviewer.core import last_session
    from dmlviewer.core.data.identity import listing_fingerprint

    root = tmp_path / "data"
    dataset = _folder(root, 1, 3)
    other = _folder(tmp_path / "other", 2, 3)
    sha = {"a.pt": "a" * 64, "b.pt": "b" * 64}
    monkeypatch.setattr(last_session, "open_source", lambda source, device: (object(), {"sha256": sha[Path(
        source.path).name]}))
    files = {"a.h5": ("a" * 64, dataset), "b.h5": ("b" * 64, dataset), "of-a.h5": ("a" * 64, dataset),
             "other.h5": ("b" * 64, other)}

    def open_features(path):
        checksum, listing = files[Path(path).name]
        return SimpleNamespace(attrs={"dataset_fingerprint": listing_fingerprint(listing),
                                      "checkpoint_sha256": checksum}, paths=list(listing.paths))

    monkeypatch.setattr(evaluate, "open_features", open_features)
    for name in files:
        (tmp_path / name).write_bytes(b"")

    def read(compare_features: str, models=("a.pt", "b.pt")) -> dict:
        remembered = {"dataset": str(root), "features": str(tmp_path / "a.h5"),
                      "compare_features": str(tmp_path / compare_features),
                      "models": {slot: {"kind": "checkpoint", "path": str(tmp_path / name)}
                                 for slot, name in zip(("primary", "compare"), models)}}
        return last_session.read_session_files(last_session={"last": json.dumps(remembered)})

    result = read("b.h5")
    assert result["errors"] == [] and result["compare_features"][1] == str(tmp_path / "b.h5")
    assert result["compare_features"][0].attrs["checkpoint_sha256"] == "b" * 64
    assert result["features"][1] == str(tmp_path / "a.h5")
    caplog.set_level(logging.INFO, logger="dmlviewer.core.last_session")
    for name, says in (("of-a.h5", "another checkpoint"), ("other.h5", "another dataset"), ("gone.h5", "gone")):
        caplog.clear()
        result = read(name)
        assert "compare_features" not in result and result["errors"] == [] and "compare" in result
        assert result["features"][1] == str(tmp_path / "a.h5")  # model A's file is not affected
        assert any(name in r.getMessage() and says in r.getMessage() for r in caplog.records), caplog.text
    result = read("b.h5", models=("a.pt",))  # no model B: its file is not read
    assert "compare" not in result and "compare_features" not in result


@pytest.mark.parametrize("value, says", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not an object"),
    (42, "not an object"),
    ({"dataset": 5}, "'dataset'"),
    ({"dataset": "a\x00b"}, "'dataset'"),
    ({"query": "x" * 5000}, "'query'"),
    ({"compare_features": ["b.h5"]}, "'compare_features'"),
    ({"format": "../../etc"}, "format"),
    ({"models": ["a.pt"]}, "models"),
    ({"models": {"third": {"kind": "checkpoint", "path": "a.pt"}}}, "slot"),
    ({"models": {"primary": {"kind": "python", "label": "x"}}}, "cannot be reopened"),
    ({"models": {"primary": {"kind": "code"}}}, "no entry"),
    ({"models": {"primary": {"kind": "code", "entry": "m.py:f", "args": "rm -rf"}}}, "'args'"),
    ({"models": {"primary": {"kind": "checkpoint", "path": ["a"]}}}, "'path'"),
    ("x" * 100_000, "too long"),
])
def test_hostile_settings_are_refused_with_one_line(value, says):
    with pytest.raises(SessionError) as info:
        Session.from_dict(value)
    message = str(info.value)
    assert says in message and "\n" not in message and len(message) < 300


def test_recent_models_newest_first_without_duplicates(tmp_path):
    ckpt = tmp_path / "a.pt"
    items: list = [str(ckpt), "imagenet:resnet18", {"kind": "python"}, 17]
    sources = recent_sources(items)  # the old plain paths read; what cannot be read is skipped
    assert [s.kind for s in sources] == ["checkpoint", "pretrained"]
    code = ModelSource("code", entry=f"{tmp_path}/m.py:build", weights=str(tmp_path / "w.pth"))
    items = add_recent_source(items, code)
    assert [d["kind"] for d in items] == ["code", "checkpoint", "pretrained"]
    items = add_recent_source(items, ModelSource("checkpoint", path=str(tmp_path / "." / "a.pt")))
    assert [d["kind"] for d in items] == ["checkpoint", "code", "pretrained"]  # the same file, moved up
    items = add_recent_source(items, ModelSource("python", label="live"))
    assert len(items) == 3  # a live module is not remembered
    for i in range(12):
        items = add_recent_source(items, ModelSource("checkpoint", path=str(tmp_path / f"{i}.pt")), limit=5)
    assert len(items) == 5 and items[0]["path"] == str(tmp_path / "11.pt")
    assert all(isinstance(json.dumps(d), str) for d in items)


def test_reading_a_last_session_whose_dataset_is_gone_opens_the_demo_and_says_so(tmp_path):
    from dmlviewer.core.data import make_demo_data
    from dmlviewer.core.last_session import read_session_files

    demo = tmp_path / "demo"
    make_demo_data(demo, classes=2, per_class=2, size=32, seed=0)
    steps: list[str] = []
    gone = {"last": json.dumps({"dataset": str(tmp_path / "gone"), "models": {"primary": {"kind": "checkpoint",
                                                                                        "path": "/x.pt"}}})}
    result = read_session_files(last_session=gone, demo=lambda: (demo, None), step=steps.append)
    assert result["dataset"][1] == str(demo) and "model" not in result
    assert f"dataset {tmp_path / 'gone'} is gone" in result["notice"] and "No demo checkpoint" in result["notice"]
    assert result["errors"] == [] and any("demo" in s for s in steps)
    # The dataset is there, the model is not: the dataset opens and the model's failure is named.
    here = {"last": json.dumps({"dataset": str(demo), "format": "cub",
                                "models": {"primary": {"kind": "checkpoint", "path": str(tmp_path / "x.pt")}}})}
    result = read_session_files(last_session=here, demo=lambda: (tmp_path / "never", None))
    assert result["dataset"][1] == str(demo)
    [(title, exc, source)] = result["errors"]
    assert title == "Cannot reopen the last session's model" and str(exc) == f"checkpoint not found: {tmp_path / 'x.pt'}"
    assert source.kind == "checkpoint"


def test_the_display_options_are_evented_and_saved_with_the_last_session_and_hostile_values_skipped(tmp_path):
    s = Session()
    heard: list = []
    s.display.events.sign.connect(heard.append)
    s.display.sign = "signed"
    s.display.opacity = 0.25
    assert heard == ["signed"]
    text = json.dumps(s.to_dict())
    restored = Session()
    assert restored.display.update(Session.from_dict(text).display) == []
    assert restored.display == s.display
    hostile = json.loads(text)
    hostile["display"].update(sign="rm -rf", opacity="nan%", colormap=["jet"], method="decomposition")
    back = Session.from_dict(json.dumps(hostile))
    fresh = Session()
    skipped = fresh.display.update(back.display)
    assert sorted(skipped) == ["opacity", "sign"]  # a list is not kept from settings at all
    assert (fresh.display.sign, fresh.display.opacity, fresh.display.colormap) == ("positive", 0.6, "jet")
    assert Session.from_dict(json.dumps({"display": "oops"})).display == {}  # ignored, not refused


def _folder(root, seed: int, per_class: int):
    from dmlviewer.core.data import make_demo_data, open_dataset

    make_demo_data(root, classes=2, per_class=per_class, size=32, seed=seed)
    return open_dataset(root)


def test_features_are_bound_to_the_dataset_identity_not_to_its_file_names(tmp_path):
    """Two demo folders with the same file names (other seeds) are two datasets; a copy of a
    folder is the same one; a file without a fingerprint fits only its own folder's listing."""
    import shutil

    from dmlviewer.core.data.identity import dataset_identity, listing_fingerprint

    one, two = _folder(tmp_path / "one", 1, 3), _folder(tmp_path / "two", 2, 3)
    assert one.paths == two.paths
    assert listing_fingerprint(one) != listing_fingerprint(two)
    shutil.copytree(tmp_path / "one", tmp_path / "copy")
    from dmlviewer.core.data import open_dataset

    copy = open_dataset(tmp_path / "copy")
    assert dataset_identity(copy).fingerprint == dataset_identity(one).fingerprint
    assert dataset_identity(copy).root != dataset_identity(one).root

    s = Session()
    s.set_dataset(one, str(tmp_path / "one"))
    heard = _record(s)
    bound = SimpleNamespace(attrs={"dataset_fingerprint": listing_fingerprint(one), "checkpoint_sha256": "a" * 64},
                            paths=one.paths)
    legacy = SimpleNamespace(attrs={"dataset_root": str(tmp_path / "one")}, paths=list(one.paths))
    assert s.features_fit(bound) and s.features_fit(legacy)
    s.set_features(bound, "one.h5")
    s.set_dataset(copy, str(tmp_path / "copy"))  # the same listing elsewhere: the features stay
    assert s.features is bound and len(heard["features"]) == 1  # set_features only
    assert not s.features_fit(legacy)  # no fingerprint: only its own folder
    s.set_dataset(two, str(tmp_path / "two"))  # same names, other images: the features go, said once
    assert s.features is None and len(heard["features"]) == 2
    assert "another dataset" in s.features_problem(bound)
    legacy_partial = SimpleNamespace(attrs={"dataset_root": str(tmp_path / "two")}, paths=two.paths[:-1])
    assert not s.features_fit(legacy_partial)
    # A file of one split (``evaluate --split test``) carries the fingerprint of its images: it
    # fits its own folder, never the other one with the same names.
    test = two.select_split("test")
    split_file = SimpleNamespace(attrs={"dataset_fingerprint": listing_fingerprint(test)}, paths=test.paths)
    assert 0 < len(test) < len(two) and s.features_fit(split_file)
    s.set_dataset(one, str(tmp_path / "one"))
    assert not s.features_fit(split_file)


def test_jobs_are_held_with_their_stamps_and_a_feature_stamp_follows_the_feature_file(tmp_path):
    s = Session()
    s.set_dataset(_dataset(), str(tmp_path))
    s.set_model(object(), {"sha256": "1" * 64})
    heard = _record(s)
    s.add_job(7, "extract", "Extract")
    assert s.running("extract") == [7] and len(heard["jobs"]) == 1
    stamp = s.stamp(features=True)
    s.set_features(SimpleNamespace(attrs={}), "f.h5")
    assert not s.accepts(stamp) and s.accepts(s.stamp(features=True))
    s.set_model(object(), {"sha256": "2" * 64})
    assert s.running("extract") == []  # its model is gone
    assert s.end_job(7).kind == "extract" and len(heard["jobs"]) == 2 and s.end_job(7) is None


def test_a_bad_display_option_from_python_raises_naming_the_field_and_changes_nothing():
    """Issue 39 item 5: the display options validate on assignment, before any event."""
    from dmlviewer.core.display import DisplayError

    s = Session()
    heard: list = []
    s.display.events.connect(lambda info: heard.append(info.signal.name))
    for name, bad in (("sign", "both"), ("opacity", 1.5), ("opacity", "half"), ("colormap", "rainbow"),
                      ("match_count", 0), ("input_size", "big"), ("method", "magic")):
        before = getattr(s.display, name)
        with pytest.raises(DisplayError, match=f"^{name}: "):
            setattr(s.display, name, bad)
        assert getattr(s.display, name) == before
    assert heard == []
    s.display.opacity = "0.25"  # a good value is kept as the field holds it, announced once
    assert s.display.opacity == 0.25 and heard == ["opacity"]
    with pytest.raises(DisplayError, match="opacity"):
        DisplayOptions(opacity=2.0)


def test_set_pinned_takes_side_names_or_numbers_and_refuses_anything_else_without_an_event():
    """Issue 42 item 9 and issue 39 item 5: ``(side, x, y)`` with side 0/"query" or
    1/"reference"; a bad point raises naming the field, stores nothing and emits nothing."""
    s = Session()
    heard = _record(s)
    s.set_pinned(("query", 40, 41))
    assert s.pinned == (0, 40.0, 41.0)
    s.set_pinned((0, 40.0, 41.0))  # the same point: no second event
    s.set_pinned(["reference", "12", 3])
    assert s.pinned == (1, 12.0, 3.0) and len(heard["pinned"]) == 2
    for bad, says in ((("left", 1, 2), "side 'left'"), ((2, 1, 2), "side 2"), ((0, "a", 2), "not numbers"),
                      ((0, float("inf"), 2), "not finite"), ((0, 1), "is not \\(side, x, y\\)"), (7, "is not")):
        with pytest.raises(SessionError, match=f"^pinned: .*{says}"):
            s.set_pinned(bad)
    assert s.pinned == (1, 12.0, 3.0) and len(heard["pinned"]) == 2
    s.set_pinned(None)
    assert s.pinned is None and len(heard["pinned"]) == 3


def test_set_pair_refuses_an_index_that_is_not_an_image_of_the_open_dataset(tmp_path):
    s = Session()
    s.set_dataset(_dataset(4), str(tmp_path))
    heard = _record(s)
    for name, pair in (("query_index", (4, 1)), ("reference_index", (0, -1)), ("query_index", ("1", 2)),
                       ("query_index", (1.5, 2))):
        with pytest.raises(SessionError, match=f"^{name}: "):
            s.set_pair(*pair)
    assert (s.query_index, s.reference_index) == (None, None) and heard["pair"] == []
    s.set_pair(3, 0)
    assert (s.query_index, s.reference_index) == (3, 0)


def test_model_b_may_have_its_own_reference_and_a_bad_one_changes_nothing(tmp_path):
    """Issue 41: ``set_pair(query, reference, reference_b)`` gives row B its own reference; a
    bad ``reference_b`` raises one error naming the field, with no event and the pair kept; a
    plain ``set_pair`` (or another dataset) drops it."""
    s = Session()
    s.set_dataset(_dataset(4), str(tmp_path))
    s.set_pair(0, 1)
    heard = _record(s)
    for bad in (4, -1, "2", 2.0, True):
        with pytest.raises(SessionError, match="^reference_b: ") as caught:
            s.set_pair(0, 1, bad)
        assert "\n" not in str(caught.value)
    assert (s.query_index, s.reference_index, s.reference_b) == (0, 1, None) and heard["pair"] == []
    s.set_pair(0, 1, 2)
    assert (s.reference_b, s.row_reference("primary"), s.row_reference("compare")) == (2, 1, 2)
    assert len(heard["pair"]) == 1
    s.set_pair(0, 1, 2)  # no change: no event
    assert len(heard["pair"]) == 1
    s.set_pair(0, 1)
    assert s.reference_b is None and s.row_reference("compare") == 1 and len(heard["pair"]) == 2
    s.set_pair(0, 1, 1)  # model B's reference is A's: one reference for both rows
    assert s.reference_b is None and len(heard["pair"]) == 2
    s.set_model(object(), slot="compare")
    s.set_pair(0, 1, 3)
    s.set_model(None, slot="compare")  # model B closed: its reference goes with it
    assert (s.query_index, s.reference_index, s.reference_b) == (0, 1, None)
    s.set_pair(0, 1, 3)
    s.set_dataset(_dataset(4), str(tmp_path))
    assert s.reference_b is None


def test_model_bs_feature_file_is_checked_against_model_b_and_the_dataset_and_named_as_model_bs(tmp_path):
    """Issue 41: each slot has its own feature file, checked against that slot's checksum and
    the dataset identity; model B's refusals name model B, model A's sentences are unchanged,
    and a stamp taken with model B's features follows model B's file only."""
    from dmlviewer.core.data.identity import listing_fingerprint

    one, two = _folder(tmp_path / "one", 1, 3), _folder(tmp_path / "two", 2, 3)
    sha_a, sha_b = "a" * 64, "b" * 64
    s = Session()
    s.set_dataset(one, str(tmp_path / "one"))
    s.set_model(object(), {"sha256": sha_a})
    s.set_model(object(), {"sha256": sha_b}, slot="compare")
    heard = _record(s)

    def file(sha: str, dataset=one):
        return SimpleNamespace(attrs={"dataset_fingerprint": listing_fingerprint(dataset), "checkpoint_sha256": sha},
                               paths=list(dataset.paths))

    a_file, b_file = file(sha_a), file(sha_b)
    s.set_features(a_file, "a.h5")
    stamp_b = s.stamp("compare", features=True)
    s.set_features(a_file, "a.h5", chosen=True, slot="compare")  # A's file given to model B: the wrong checksum
    assert heard["features"] == [("primary",), ("compare",)]
    assert s.features is a_file and s.features_path == "a.h5" and not s.features_chosen  # A's untouched
    assert s.features_mismatch() is None and s.features_ready("primary")
    cause, sentence = s.features_mismatch(slot="compare")
    assert cause == "model" and "model B" in sentence and sha_a[:12] in sentence and sha_b[:12] in sentence
    assert not s.features_ready("compare") and s.slot_features["compare"].chosen
    assert not s.accepts(stamp_b)  # B's feature file changed
    # model A's sentence for the same mismatch is the one the app always showed
    assert s.features_problem(b_file) == (f"These features were computed by another checkpoint (sha256 "
                                          f"{sha_b[:12]}…) than the open one ({sha_a[:12]}…): their neighbours "
                                          "are not shown.")
    s.set_features(b_file, "b.h5", slot="compare")
    assert s.features_mismatch(slot="compare") is None and s.features_ready("compare")
    stamp_a, stamp_b = s.stamp(features=True), s.stamp("compare", features=True)
    other = file(sha_b, two)  # model B's checksum, the other dataset
    assert s.features_mismatch(other, slot="compare")[0] == "dataset"
    assert "model B" in s.features_problem(other, slot="compare")
    s.set_features(other, "other.h5", slot="compare")
    assert s.accepts(stamp_a) and not s.accepts(stamp_b)  # A's stamp ignores B's file
    unrecorded = SimpleNamespace(attrs={"dataset_fingerprint": listing_fingerprint(one)}, paths=list(one.paths))
    assert s.features_mismatch(unrecorded, slot="compare") == (
        "unrecorded", "These features of model B do not say which checkpoint computed them, so they may belong to "
                      "another model: their neighbours are not shown.")
    # another dataset drops every slot's file that does not fit it, each with its event
    s.set_features(b_file, "b.h5", slot="compare")
    del heard["features"][:]
    s.set_dataset(two, str(tmp_path / "two"))
    assert s.features is None and s.slot_features["compare"].features is None
    assert sorted(heard["features"]) == [("compare",), ("primary",)]
    with pytest.raises(ValueError, match="unknown model slot 'C'"):
        s.set_features(b_file, "b.h5", slot="C")
