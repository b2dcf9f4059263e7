"""Drive ``huggingface_hub``'s client against ``tests/hub_server.py`` through the calls a training run does not make
(``tests/test_hub_push.py::test_hub_server_speaks_the_client_protocol`` checks the answers and the server's state).

Run as ``python -m tests.hub_client_check FOLDER`` with ``HF_ENDPOINT``, ``HF_TOKEN`` and ``HF_HUB_DISABLE_XET=1`` set;
writes ``FOLDER/answers.json``. Only ``huggingface_hub`` is imported (no torch): this takes a second or two.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError

REPO_ID = "someone/files"


def main(root: Path) -> None:
    api = HfApi()
    folder = root / "folder"
    (folder / "notes").mkdir(parents=True)
    (folder / "weights.safetensors").write_bytes(os.urandom(3000))  # LFS by name
    (folder / "README.md").write_text("---\ntags:\n- test\n---\n# A card\n")
    (folder / "notes" / "a.txt").write_text("a")
    (folder / "notes" / "b.txt").write_text("b")
    answers: dict = {"urls": [str(api.create_repo(REPO_ID)), str(api.create_repo(REPO_ID, exist_ok=True))]}
    first = api.upload_folder(repo_id=REPO_ID, folder_path=folder, commit_message="add files")
    again = api.upload_folder(repo_id=REPO_ID, folder_path=folder, commit_message="unchanged")  # skipped: no change
    answers["first"], answers["again"] = first.oid, again.oid
    api.delete_file("notes/b.txt", repo_id=REPO_ID, commit_message="delete b")
    tree = api.list_repo_tree(REPO_ID, recursive=True)
    answers["tree"] = {entry.path: getattr(entry, "lfs", None) is not None for entry in tree}
    answers["top"] = sorted(entry.path for entry in api.list_repo_tree(REPO_ID))
    info = api.model_info(REPO_ID)
    answers["sha"], answers["siblings"] = info.sha, sorted(s.rfilename for s in info.siblings or [])
    snapshot = Path(snapshot_download(REPO_ID, cache_dir=root / "cache"))
    answers["snapshot_equal"] = {
        name: (snapshot / name).read_bytes() == (folder / name).read_bytes()
        for name in ("weights.safetensors", "README.md", "notes/a.txt")
    }
    answers["snapshot_has_b"] = (snapshot / "notes" / "b.txt").exists()
    old_b = hf_hub_download(REPO_ID, "notes/b.txt", revision=first.oid, cache_dir=root / "cache")
    answers["b_at_first_commit"] = Path(old_b).read_text()
    try:
        hf_hub_download(REPO_ID, "missing.txt", cache_dir=root / "cache")
    except EntryNotFoundError:
        answers["missing"] = "EntryNotFoundError"
    api.delete_folder("notes", repo_id=REPO_ID, commit_message="delete notes")
    (folder / "README.md").write_text("---\ntags: [unclosed\n---\n")
    try:
        api.upload_file(path_or_fileobj=folder / "README.md", path_in_repo="README.md", repo_id=REPO_ID)
    except ValueError as error:
        answers["bad_card"] = str(error).splitlines()[0]
    (root / "answers.json").write_text(json.dumps(answers))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
