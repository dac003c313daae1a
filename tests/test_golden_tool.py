"""tools/golden.py: a recorded hash that a change turns into a compile error is reported as such,
and `--write` refuses to record it unless told (the small legacy_opset13 once failed to compile
and a write recorded the error as its new hash)."""
import json

from tools import golden


def test_newly_failing_lists_hashes_turned_into_errors():
    before = {"zoo/a/c:1": "0123", "zoo/b/c:1": "error ShapeError: old", "zoo/c/c:1": "4567"}
    after = {"zoo/a/c:1": "error ShapeError: new", "zoo/b/c:1": "error ShapeError: still",
             "zoo/c/c:1": "89ab", "zoo/d/c:1": "error: a new entry"}
    assert golden.newly_failing(before, after) == ["zoo/a/c:1"]


def test_write_refuses_a_new_failure(tmp_path, monkeypatch, capsys):
    ref = tmp_path / "golden.json"
    ref.write_text(json.dumps({"native": golden_native(), "hashes": {"case/x/c:1": "0123"}}))
    monkeypatch.setattr(golden, "collect_jobs", lambda only, filt, workdir: [("case", "x", "c", 1, workdir)])
    monkeypatch.setattr(golden, "_build_zoo", lambda names, workdir: None)
    monkeypatch.setattr(golden, "_run", _broken)
    assert golden.main(["--write", str(ref), "--jobs", "1"]) == 1
    assert "NOW FAILS case/x/c:1" in capsys.readouterr().err
    assert json.loads(ref.read_text())["hashes"]["case/x/c:1"] == "0123"
    assert golden.main(["--write", str(ref), "--jobs", "1", "--accept-failures"]) == 0
    assert json.loads(ref.read_text())["hashes"]["case/x/c:1"].startswith("error")


def _broken(job):                  # (a module-level function: the pool's workers get it by name)
    return "case/x/c:1", "error ShapeError: broken"


def golden_native():
    from aotc.targets import native_target
    return native_target()
