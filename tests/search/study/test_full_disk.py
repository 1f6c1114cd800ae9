"""A full disk stops a search with one line naming the file, leaves the journal whole,
and ``--resume`` then completes exactly the budget."""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml
from optuna.storages.journal import JournalFileBackend, JournalStorage

from frontier.search.cli import main
from frontier.search.study._storage import repair_journal

CONFIG = {
    "name": "tiny",
    "task": {"name": "digits", "options": {"model": "mlp"}},
    "space": {"prune_ratios": [0.0, 0.5, 0.75], "weight_bits": [4, 8, 32], "act_bits": [32]},
    "objectives": [{"name": "accuracy", "options": {"steps": 20}}, "size_bytes"],
    "search": {
        "trials": 40,
        "population": 8,
        "seed": 0,
        "fidelity": {"rungs": ["proxy", "short"], "promote": 0.5},
    },
}
JOURNAL = "frontier-optuna.journal"


def _complete(folder: Path) -> list[int]:
    """The completed trials' numbers, read as Optuna reads the journal (it raises on a
    corrupted one)."""
    storage = JournalStorage(JournalFileBackend(str(folder / JOURNAL)))
    study = optuna.load_study(study_name="tiny", storage=storage)
    return [t.number for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]


@pytest.fixture
def small_disk(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A folder on a 1 MiB file system the test mounts (tmpfs), filled to leave 48 KiB:
    the search's journal (``--storage``) fills it; its MLflow store stays in the working
    directory. Where mounting is not allowed, the same fault is injected instead: the
    journal's fourth write puts half its bytes on disk, then fails with ENOSPC."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = False
    if os.geteuid() == 0:  # a container may still refuse it, or have no mount command
        try:
            mounted = (
                subprocess.run(
                    ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)],
                    capture_output=True,
                    check=False,
                    timeout=30,
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            mounted = False
    monkeypatch.chdir(tmp_path)
    filler = folder / "filler"
    if mounted:
        stat = os.statvfs(folder)
        filler.write_bytes(b"\0" * (stat.f_bavail * stat.f_frsize - 48 * 1024))
    else:
        state = {"writes": 0, "fired": False}
        original = JournalFileBackend.append_logs

        def append(self, logs):
            state["writes"] += 1
            if state["writes"] == 4 and not state["fired"]:
                state["fired"] = True
                with open(self._file_path, "ab") as f:
                    f.write(b'{"op_code": 5, "worker_id": "half-writ')
                raise OSError(errno.ENOSPC, "No space left on device")
            return original(self, logs)

        monkeypatch.setattr(JournalFileBackend, "append_logs", append)
    yield folder, filler, mounted
    if mounted:  # lazily: the search's MLflow store may still hold a file open there
        subprocess.run(["umount", "-l", str(folder)], check=False)


@pytest.mark.slow
def test_a_full_disk_stops_the_search_and_resume_completes_it(small_disk, capsys) -> None:
    folder, filler, mounted = small_disk
    Path("tiny.yaml").write_text(yaml.safe_dump(CONFIG))
    storage = ["--storage", f"journal:{folder / JOURNAL}"]
    assert main(["search", "tiny.yaml", *storage, "--no-progress"]) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("frontier: error:")]
    assert lines == [
        f"frontier: error: no space left on the device holding {folder / JOURNAL} (the study "
        "journal): the search stopped, and every trial it finished before is saved; free "
        "some space, then run the same command with --resume to continue"
    ], err
    assert "Traceback" not in err
    # the journal is whole: Optuna reads it, and the trials before the full disk are in it
    before = _complete(folder)
    assert 0 < len(before) < CONFIG["search"]["trials"]
    if mounted:
        filler.unlink()  # space again (the injected fault fires once)
    assert main(["search", "tiny.yaml", *storage, "--resume", "--no-progress"]) == 0
    after = _complete(folder)
    assert len(after) == CONFIG["search"]["trials"] == len(set(after))
    assert set(before) <= set(after)


def test_a_partly_written_last_entry_is_dropped_before_the_next_append(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL
    whole = b'{"op_code": 0, "worker_id": "a"}\n{"op_code": 1, "worker_id": "b"}\n'
    path.write_bytes(whole + b'{"op_code": 5, "wor')
    assert repair_journal(path) == len(b'{"op_code": 5, "wor')
    assert path.read_bytes() == whole
    assert repair_journal(path) == 0  # a whole journal is left as it is
