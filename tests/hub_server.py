"""A loopback stand-in for the Hugging Face Hub, so tests drive ``huggingface_hub``'s real client over real HTTP.

It implements the routes that ``huggingface_hub`` 2.x calls to push a folder (``create_repo``, ``upload_folder`` /
``create_commit`` with plain LFS: the client must run with ``HF_HUB_DISABLE_XET=1``) and to read it back
(``hf_hub_download`` as ``from_pretrained`` uses it, ``repo_info`` and the tree listing ``snapshot_download`` uses).
Model repos only, branch ``main`` only; one page per listing; no pull requests. Repos live in memory, each with its
full commit history (``HubServer.repos``), and LFS objects in one store for all repos (``HubServer.lfs_objects``)::

    GET      /api/agent-harnesses                        the client's user-agent registry: served empty
    HEAD     /api/telemetry/{topic}                      usage telemetry (TRL's trainers send it): dropped
    POST     /api/repos/create                           create a repo (its first commit holds .gitattributes)
    POST     /api/validate-yaml                          the model card's front matter must be valid YAML
    GET      /api/models/{repo}[/revision/{rev}]         repo info: head commit sha, siblings
    GET      /api/models/{repo}/tree/{rev}[/{folder}]    file listing (?recursive=), with LFS metadata
    POST     /api/models/{repo}/preupload/{rev}          per file: "regular" or "lfs", and the remote oid
    POST     /{repo}.git/info/lfs/objects/batch          LFS batch API: an upload and a verify action per new object
    PUT      /lfs/{sha256}                               LFS object upload (no token, like a presigned URL)
    POST     /lfs/{sha256}/verify                        LFS verify (oid and size)
    POST     /api/models/{repo}/commit/{rev}             ndjson commit: header, file, lfsFile, deletedFile/Folder
    HEAD/GET /{repo}/resolve/{rev}/{path}                content with ETag, X-Repo-Commit, Content-Length
                                                         (LFS files: X-Linked-Etag/X-Linked-Size = sha256/size)

Anything else answers 404 and is recorded in ``HubServer.unhandled``, so a test can assert the client needed no
route this server lacks. This is test harness, not a Hub: no permissions (any bearer token may write), no Xet.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

# Stored as LFS like the Hub's default .gitattributes does (plus anything binary or over 10 MB).
LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx", ".zip")
GITATTRIBUTES = "".join(f"*{suffix} filter=lfs diff=lfs merge=lfs -text\n" for suffix in LFS_SUFFIXES).encode()
REPO = r"(?P<repo>[\w.-]+/[\w.-]+)"


def git_blob_id(data: bytes) -> str:
    """The git object id of a blob (what the Hub reports as a regular file's oid and ETag)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


@dataclass(frozen=True)
class Commit:
    oid: str  # 40 hex digits, like a git commit id
    title: str
    files: dict[str, bytes] = field(repr=False)  # the whole tree after this commit
    lfs: frozenset[str] = field(repr=False)  # the paths stored as LFS objects

    def entry(self, path: str) -> dict[str, Any]:
        """A tree-listing entry (the fields ``huggingface_hub.hf_api.RepoFile`` reads)."""
        data = self.files[path]
        info: dict[str, Any] = {"type": "file", "path": path, "size": len(data)}
        if path in self.lfs:
            sha256 = hashlib.sha256(data).hexdigest()
            pointer = lfs_pointer(sha256, len(data))
            info["oid"] = git_blob_id(pointer)  # git stores the pointer file
            info["lfs"] = {"oid": sha256, "size": len(data), "pointerSize": len(pointer)}
        else:
            info["oid"] = git_blob_id(data)
        return info


@dataclass
class Repo:
    commits: list[Commit] = field(default_factory=list)  # oldest first; the last one is "main"

    def revision(self, rev: str) -> Commit | None:
        if rev == "main":
            return self.commits[-1]
        return next((c for c in self.commits if c.oid == rev), None)


class HubServer:
    """``with HubServer() as hub:`` serves on ``hub.url`` (127.0.0.1, a free port) from a thread."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.lfs_objects: dict[str, bytes] = {}  # sha256 -> content, filled by PUT /lfs/{sha256}
        self.requests: list[tuple[str, str, int]] = []  # (method, path, status) of every request
        self.unhandled: list[str] = []
        self.lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._thread = threading.Thread(target=self._http.serve_forever, name="hub-server", daemon=True)

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join()

    def head(self, repo_id: str) -> Commit:
        return self.repos[repo_id].commits[-1]

    # ------------------------------------------------------------------ state changes (under self.lock)
    def create_repo(self, repo_id: str) -> bool:
        with self.lock:
            if repo_id in self.repos:
                return False
            files = {".gitattributes": GITATTRIBUTES}
            first = Commit(self._commit_id("", "initial commit", files), "initial commit", files, frozenset())
            self.repos[repo_id] = Repo([first])
            return True

    def commit(self, repo_id: str, lines: list[dict[str, Any]]) -> Commit:
        """Apply an ndjson commit payload (already parsed) to ``main``; ValueError for a bad payload."""
        header = lines[0]["value"] if lines and lines[0].get("key") == "header" else None
        if header is None:
            raise ValueError("the first line of a commit must be its header")
        with self.lock:
            parent = self.repos[repo_id].commits[-1]
            if header.get("parentCommit") not in (None, parent.oid):
                raise ValueError(f"parentCommit {header['parentCommit']} is not the head {parent.oid}")
            files, lfs = dict(parent.files), set(parent.lfs)
            for line in lines[1:]:
                key, value = line["key"], line["value"]
                path = value["path"].strip("/")
                if key == "file" and value.get("encoding") == "base64":
                    files[path] = base64.b64decode(value["content"])
                    lfs.discard(path)
                elif key == "lfsFile":
                    data = self.lfs_objects.get(value["oid"])
                    if data is None or len(data) != value["size"]:
                        raise ValueError(f"{path}: LFS object {value['oid']} was not uploaded")
                    files[path] = data
                    lfs.add(path)
                elif key == "deletedFile":
                    if files.pop(path, None) is None:
                        raise ValueError(f"{path}: A file with this name doesn't exist")
                elif key == "deletedFolder":
                    files = {name: data for name, data in files.items() if not name.startswith(path + "/")}
                else:
                    raise ValueError(f"unsupported commit operation {key!r} on {path!r}")
            title = header["summary"]
            new = Commit(self._commit_id(parent.oid, title, files), title, files, frozenset(lfs & set(files)))
            self.repos[repo_id].commits.append(new)
            return new

    @staticmethod
    def _commit_id(parent: str, title: str, files: dict[str, bytes]) -> str:
        listing = json.dumps([parent, title, sorted((p, git_blob_id(d)) for p, d in files.items())])
        return hashlib.sha1(listing.encode()).hexdigest()


def _handler_for(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(_Handler):
        server_state = hub

    return Handler


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: every response carries a Content-Length
    server_state: HubServer
    query: dict[str, list[str]]

    def log_message(self, format: str, *args: Any) -> None:  # quiet: the test output stays readable
        pass

    # ------------------------------------------------------------------ plumbing
    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline().strip():  # trailers, then the blank line
                pass
            return b"".join(chunks)
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _json(self) -> Any:
        return json.loads(self._body() or b"{}")

    def _send(self, status: int, body: bytes | dict | list = b"", headers: dict[str, str] | None = None) -> None:
        if not isinstance(body, bytes):
            body = json.dumps(body).encode()
            headers = {"Content-Type": "application/json", **(headers or {})}
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.server_state.requests.append((self.command, self.path, status))

    def _error(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        """An error the client maps to its exception classes (``hf_raise_for_status`` reads X-Error-Code)."""
        self._send(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message, **(headers or {})})

    def _authorized(self) -> bool:
        if self.headers.get("Authorization", "").startswith("Bearer "):
            return True
        self._error(401, "Unauthorized", "a write needs a token (any bearer token is accepted here)")
        return False

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.server_state.repos.get(repo_id)
        if repo is None:
            self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
        return repo

    def _commit(self, repo_id: str, rev: str) -> Commit | None:
        repo = self._repo(repo_id)
        if repo is None:
            return None
        commit = repo.revision(unquote(rev))
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {unquote(rev)}")
        return commit

    def _route(self, routes: list[tuple[str, Any]]) -> None:
        url = urlsplit(self.path)
        self.query = parse_qs(url.query)
        for pattern, method in routes:
            match = re.fullmatch(pattern, url.path)
            if match:
                try:
                    method(self, **match.groupdict())
                except (ValueError, KeyError) as error:
                    self._error(400, "BadRequest", f"{type(error).__name__}: {error}")
                return
        self.server_state.unhandled.append(f"{self.command} {self.path}")
        self._send(404, {"error": f"no such route in tests/hub_server.py: {self.command} {url.path}"})

    def do_GET(self) -> None:
        self._route([
            (r"/api/agent-harnesses", lambda handler: handler._send(200, {"standardEnvVars": [], "harnesses": {}})),
            (r"/api/telemetry/.+", lambda handler: handler._send(200)),
            (rf"/api/models/{REPO}(?:/revision/(?P<rev>[^/]+))?", _Handler.repo_info),
            (rf"/api/models/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<folder>.+))?", _Handler.tree),
            (rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", _Handler.resolve),
        ])  # fmt: skip

    do_HEAD = do_GET

    def do_POST(self) -> None:
        self._route([
            (r"/api/repos/create", _Handler.create_repo),
            (r"/api/validate-yaml", _Handler.validate_yaml),
            (rf"/api/models/{REPO}/preupload/(?P<rev>[^/]+)", _Handler.preupload),
            (rf"/api/models/{REPO}/commit/(?P<rev>[^/]+)", _Handler.commit),
            (rf"/{REPO}\.git/info/lfs/objects/batch", _Handler.lfs_batch),
            (r"/lfs/(?P<oid>[0-9a-f]{64})/verify", _Handler.lfs_verify),
        ])  # fmt: skip

    def do_PUT(self) -> None:
        self._route([(r"/lfs/(?P<oid>[0-9a-f]{64})", _Handler.lfs_upload)])

    # ------------------------------------------------------------------ routes
    def create_repo(self) -> None:
        payload = self._json()
        if not self._authorized():
            return
        if payload.get("type", "model") != "model" or not payload.get("organization"):
            raise ValueError("this server holds model repos named namespace/name only")
        repo_id = f"{payload['organization']}/{payload['name']}"
        url = f"{self.server_state.url}/{repo_id}"
        if not self.server_state.create_repo(repo_id):
            self._send(409, {"error": "You already created this model repo", "url": url})  # exist_ok reads "url"
            return
        self._send(200, {"url": url, "name": repo_id, "id": repo_id})

    def validate_yaml(self) -> None:
        content = self._json()["content"]
        if content.startswith("---\n"):
            try:
                yaml.safe_load(content[4:].split("\n---", 1)[0])
            except yaml.YAMLError as error:
                self._send(400, {"errors": [{"message": str(error)}], "warnings": []})
                return
        self._send(200, {"errors": [], "warnings": []})

    def repo_info(self, repo: str, rev: str | None) -> None:
        commit = self._commit(repo, rev or "main")
        if commit is not None:
            siblings = [{"rfilename": path} for path in sorted(commit.files)]
            self._send(200, {"id": repo, "modelId": repo, "sha": commit.oid, "private": False, "siblings": siblings})

    def tree(self, repo: str, rev: str, folder: str | None = None) -> None:
        commit = self._commit(repo, rev)
        if commit is None:
            return
        prefix = unquote(folder).strip("/") + "/" if folder else ""
        recursive = self.query.get("recursive", ["false"])[0].lower() == "true"
        entries: dict[str, dict[str, Any]] = {}
        for path in sorted(commit.files):
            if not path.startswith(prefix):
                continue
            parts = path[len(prefix) :].split("/")
            for depth in range(1, len(parts)):  # the folders between the listed one and the file
                sub = prefix + "/".join(parts[:depth])
                entries.setdefault(sub, {"type": "directory", "path": sub, "oid": "0" * 40})
                if not recursive:
                    break
            if recursive or len(parts) == 1:
                entries[path] = commit.entry(path)
        if prefix and not entries:
            self._error(404, "EntryNotFound", f"{prefix} does not exist at {commit.oid}")
            return
        self._send(200, list(entries.values()))

    def resolve(self, repo: str, rev: str, path: str) -> None:
        commit = self._commit(repo, rev)
        if commit is None:
            return
        path = unquote(path)
        if path not in commit.files:
            self._error(404, "EntryNotFound", f"{path} does not exist", {"X-Repo-Commit": commit.oid})
            return
        entry, data = commit.entry(path), commit.files[path]
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry["oid"]}"', "Accept-Ranges": "none"}
        if "lfs" in entry:  # the client caches LFS files under their sha256
            headers |= {"X-Linked-Etag": f'"{entry["lfs"]["oid"]}"', "X-Linked-Size": str(len(data))}
        self._send(200, data, headers)

    def preupload(self, repo: str, rev: str) -> None:
        payload = self._json()
        if not self._authorized():
            return
        commit = self._commit(repo, rev)
        if commit is None:
            return
        answers = []
        for file in payload["files"]:
            path, sample = file["path"], base64.b64decode(file["sample"])
            lfs = path.endswith(LFS_SUFFIXES) or file["size"] > 10_000_000 or b"\0" in sample
            remote = None  # the oid the client compares with its own to skip unchanged files
            if path in commit.files:
                entry = commit.entry(path)
                remote = entry["lfs"]["oid"] if "lfs" in entry else entry["oid"]
            mode = "lfs" if lfs else "regular"
            answers.append({"path": path, "uploadMode": mode, "shouldIgnore": False, "oid": remote})
        self._send(200, {"files": answers, "commitOid": commit.oid})

    def lfs_batch(self, repo: str) -> None:
        payload = self._json()
        if not self._authorized() or self._repo(repo) is None:
            return
        if payload.get("operation") != "upload" or "basic" not in payload.get("transfers", ["basic"]):
            raise ValueError("this server implements the basic LFS upload only")
        objects = []
        for obj in payload["objects"]:
            answer = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.server_state.lfs_objects:  # no "actions": the client skips the upload
                href = f"{self.server_state.url}/lfs/{obj['oid']}"
                answer["actions"] = {"upload": {"href": href}, "verify": {"href": f"{href}/verify"}}
            objects.append(answer)
        self._send(200, {"transfer": "basic", "objects": objects, "hash_algo": "sha256"})

    def lfs_upload(self, oid: str) -> None:
        data = self._body()
        if hashlib.sha256(data).hexdigest() != oid:
            raise ValueError(f"the uploaded content does not hash to {oid}")
        with self.server_state.lock:
            self.server_state.lfs_objects[oid] = data
        self._send(200)

    def lfs_verify(self, oid: str) -> None:
        payload = self._json()
        if not self._authorized():
            return
        data = self.server_state.lfs_objects.get(oid)
        if data is None or payload["oid"] != oid or payload["size"] != len(data):
            self._error(404, "EntryNotFound", f"LFS object {oid} of size {payload['size']} was not uploaded")
            return
        self._send(200, {"oid": oid, "size": len(data)})

    def commit(self, repo: str, rev: str) -> None:
        lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
        if not self._authorized() or self._repo(repo) is None:
            return
        if unquote(rev) != "main" or "create_pr" in self.query:
            raise ValueError("this server commits to main only (no branches, no pull requests)")
        new = self.server_state.commit(repo, lines)
        self._send(200, {"commitUrl": f"{self.server_state.url}/{repo}/commit/{new.oid}", "commitOid": new.oid})
