"""A real ComfyUI server for tests (standard library only).

    server = ComfyServer().start()          # or: with ComfyServer() as server: ...
    pid = server.queue(prompt_api_dict)      # POST /prompt; ComfyPromptError (HTTP 400 body) when invalid
    entry = server.wait(pid, timeout=300)    # GET /history/<pid> until done; ComfyExecutionError on error
    png = server.view(name, subfolder, "output")
    server.stop()

The server runs `<comfyui>/main.py --cpu --listen 127.0.0.1 --port <free port> --disable-auto-launch`
with its own temporary output/input/user/temp directories, an in-memory database, and an
`--extra-model-paths-config` YAML that puts `<workdir>/models/<folder>` first for the usual model
folders (diffusers, checkpoints, vae, text_encoders, diffusion_models, controlnet, ...). Custom nodes
come from `<comfyui>/custom_nodes` (scripts/setup.sh links the pack there as FillScope).

ComfyUI location: env COMFYUI_PATH, else `<repo>/.comfyui`. Python: env COMFYUI_PYTHON, else the
interpreter running the tests.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent

# Model folders the test YAML maps into <workdir>/models (all are ComfyUI 0.3.75 core folder names,
# so a pack that registers its own folders later is not pre-empted with an empty extension set).
MODEL_FOLDERS = (
    "diffusers",
    "checkpoints",
    "vae",
    "text_encoders",
    "diffusion_models",
    "controlnet",
    "loras",
    "clip_vision",
)


def comfyui_path() -> Path:
    """Where ComfyUI is: env COMFYUI_PATH, else <repo>/.comfyui (may not exist)."""
    env = os.environ.get("COMFYUI_PATH")
    return Path(env).expanduser().resolve() if env else REPO_ROOT / ".comfyui"


def comfyui_installed(path: Path | None = None) -> bool:
    path = comfyui_path() if path is None else Path(path)
    return (path / "main.py").is_file() and (path / "server.py").is_file()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComfyServerError(RuntimeError):
    """The server failed to start, died, or answered unexpectedly."""


class ComfyPromptError(ComfyServerError):
    """POST /prompt was rejected (HTTP 400). `.body` is the server's JSON: {"error": ..., "node_errors": ...}."""

    def __init__(self, status: int, body: Any):
        self.status = status
        self.body = body
        super().__init__(f"prompt rejected (HTTP {status}): {json.dumps(body, indent=1, default=str)}")


class ComfyExecutionError(ComfyServerError):
    """A queued prompt finished with status 'error'. `.entry` is its /history entry."""

    def __init__(self, prompt_id: str, entry: dict):
        self.prompt_id = prompt_id
        self.entry = entry
        msgs = entry.get("status", {}).get("messages", [])
        detail = ""
        for kind, data in msgs:
            if kind in ("execution_error", "execution_interrupted"):
                detail += f"\n{kind}: node {data.get('node_id')} ({data.get('node_type')}): "
                detail += f"{data.get('exception_type', '')}: {data.get('exception_message', '')}"
                tb = data.get("traceback")
                if tb:
                    detail += "\n" + "".join(tb)
        super().__init__(f"prompt {prompt_id} failed{detail or ': ' + json.dumps(entry.get('status'))}")


class ComfyServer:
    def __init__(
        self,
        comfyui: str | os.PathLike | None = None,
        *,
        port: int | None = None,
        workdir: str | os.PathLike | None = None,
        python: str | None = None,
        extra_args: list[str] | tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        startup_timeout: float = 180.0,
        front_end_root: str | os.PathLike | None = None,
    ):
        """`front_end_root`: a frontend's static folder (an unpacked comfyui-frontend-package's
        comfyui_frontend_package/static, tests/.cache/frontends/<version>/static from scripts/setup.sh) served instead of
        the one installed in ComfyUI's Python (ComfyUI's --front-end-root)."""
        self.comfyui = Path(comfyui).resolve() if comfyui else comfyui_path()
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.url = f"http://{self.host}:{self.port}"
        py = python or os.environ.get("COMFYUI_PYTHON") or sys.executable
        self.python = os.path.abspath(py) if os.sep in py else (shutil.which(py) or py)
        self.extra_args = list(extra_args)
        self.front_end_root = Path(front_end_root).resolve() if front_end_root else None
        self.env = env
        self.startup_timeout = startup_timeout
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="fillscope-comfy-"))
        self.output_dir = self.workdir / "output"
        self.input_dir = self.workdir / "input"
        self.user_dir = self.workdir / "user"
        self.temp_dir = self.workdir / "temp"  # ComfyUI appends "temp" to this itself
        self.models_dir = self.workdir / "models"
        self.extra_model_paths = self.workdir / "extra_model_paths.yaml"
        self.log_path = self.workdir / "server.log"
        self.proc: subprocess.Popen | None = None
        self._log_fh = None

    # ---- lifecycle --------------------------------------------------------------------------
    def command(self) -> list[str]:
        return [
            self.python, "main.py",
            "--cpu",
            "--listen", self.host,
            "--port", str(self.port),
            "--disable-auto-launch",
            "--output-directory", str(self.output_dir),
            "--input-directory", str(self.input_dir),
            "--user-directory", str(self.user_dir),
            "--temp-directory", str(self.temp_dir),
            "--database-url", "sqlite:///:memory:",
            "--extra-model-paths-config", str(self.extra_model_paths),
            *(["--front-end-root", str(self.front_end_root)] if self.front_end_root else []),
            *self.extra_args,
        ]  # fmt: skip

    def _write_model_paths(self) -> None:
        lines = ["fillscope_tests:", f"    base_path: {json.dumps(str(self.models_dir))}", "    is_default: true"]
        for folder in MODEL_FOLDERS:
            (self.models_dir / folder).mkdir(parents=True, exist_ok=True)
            lines.append(f"    {folder}: {folder}/")
        self.extra_model_paths.write_text("\n".join(lines) + "\n", encoding="utf-8")

    def start(self) -> "ComfyServer":
        if self.proc is not None:
            return self
        if not comfyui_installed(self.comfyui):
            raise ComfyServerError(f"ComfyUI not found at {self.comfyui} (run `make setup` or set COMFYUI_PATH)")
        if self.front_end_root is not None and not (self.front_end_root / "index.html").is_file():
            raise ComfyServerError(f"front_end_root {self.front_end_root} has no index.html (run `make setup`)")
        for d in (self.output_dir, self.input_dir, self.user_dir, self.temp_dir):
            d.mkdir(parents=True, exist_ok=True)
        self._write_model_paths()
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        self._log_fh = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.comfyui,
            stdin=subprocess.DEVNULL,
            stdout=self._log_fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # its own process group: stop() ends it and nothing else
        )
        deadline = time.monotonic() + self.startup_timeout
        last_err: Exception | None = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ComfyServerError(
                    f"ComfyUI exited with code {self.proc.returncode} during start-up.\n"
                    f"command: {' '.join(self.command())}\n--- server log ---\n{self.log_text()}"
                )
            try:
                self._request("GET", "/object_info", timeout=10)
                return self
            except (OSError, ComfyServerError) as e:  # URLError is an OSError
                last_err = e
                time.sleep(0.2)
        log = self.log_text()
        self.stop()
        raise ComfyServerError(
            f"ComfyUI did not answer /object_info within {self.startup_timeout:.0f}s ({last_err}).\n"
            f"--- server log ---\n{log}"
        )

    def alive(self) -> bool:
        """The process runs and answers HTTP."""
        if self.proc is None or self.proc.poll() is not None:
            return False
        try:
            self._request("GET", "/system_stats", timeout=5)
            return True
        except (OSError, ComfyServerError):
            return False

    def stop(self, timeout: float = 20.0) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                proc.wait(10)
        if self._log_fh is not None:
            self._log_fh.close()
            self._log_fh = None

    def cleanup(self) -> None:
        """stop() and delete the working directory if this object created it."""
        self.stop()
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "ComfyServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.cleanup()

    def log_text(self, since: int = 0) -> str:
        """The server's log (stdout and stderr), from byte offset `since` (a log_size() taken earlier) on."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(since)
                text = f.read().decode("utf-8", errors="replace")
        except FileNotFoundError:
            return ""
        return text.replace("\r\n", "\n").replace("\r", "\n")  # as a text-mode read gives it

    def log_size(self) -> int:
        """Bytes in the log so far: log_text(since=log_size()) later is what the server logged in between."""
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    # ---- HTTP -------------------------------------------------------------------------------
    def _request(self, method: str, path: str, body: Any = None, timeout: float = 60.0) -> tuple[int, bytes]:
        data = None
        headers = {}
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as e:
            payload = e.read()
            if e.code == 400 and path == "/prompt":
                try:
                    parsed: Any = json.loads(payload)
                except json.JSONDecodeError:
                    parsed = payload.decode("utf-8", "replace")
                raise ComfyPromptError(e.code, parsed) from None
            raise ComfyServerError(
                f"{method} {path} -> HTTP {e.code}: {payload[:2000].decode('utf-8', 'replace')}"
            ) from None

    def get_json(self, path: str, timeout: float = 60.0) -> Any:
        return json.loads(self._request("GET", path, timeout=timeout)[1])

    def post_json(self, path: str, body: Any, timeout: float = 60.0) -> bytes:
        return self._request("POST", path, body, timeout=timeout)[1]

    def object_info(self, node_class: str | None = None) -> dict:
        """GET /object_info (all nodes) or /object_info/<node_class> ({} if unknown)."""
        if node_class:
            return self.get_json("/object_info/" + urllib.parse.quote(node_class, safe=""))
        return self.get_json("/object_info")

    def queue(self, prompt: dict, client_id: str | None = None, extra_data: dict | None = None) -> str:
        """POST /prompt with an API-format prompt; returns prompt_id. ComfyPromptError on HTTP 400."""
        body: dict[str, Any] = {"prompt": prompt}
        if client_id is not None:
            body["client_id"] = client_id
        if extra_data:
            body["extra_data"] = extra_data
        result = json.loads(self.post_json("/prompt", body))
        return result["prompt_id"]

    def history(self, prompt_id: str | None = None) -> dict:
        """GET /history/<prompt_id> -> its entry, or {} while not finished. Without an id: all history."""
        if prompt_id is None:
            return self.get_json("/history")
        return self.get_json("/history/" + urllib.parse.quote(prompt_id, safe="")).get(prompt_id, {})

    def queue_state(self) -> dict:
        return self.get_json("/queue")

    def wait(self, prompt_id: str, timeout: float = 300.0, poll: float = 0.05, raise_on_error: bool = True) -> dict:
        """Poll /history/<prompt_id> until the prompt finished; returns the history entry
        ({"prompt", "outputs", "status", "meta"}). ComfyExecutionError if it failed (raise_on_error),
        ComfyServerError if the server dies, TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is not None:
                raise ComfyServerError(
                    f"ComfyUI exited (code {self.proc.returncode}) while waiting for {prompt_id}.\n"
                    f"--- server log ---\n{self.log_text()[-20000:]}"
                )
            entry = self.history(prompt_id)
            status = entry.get("status") or {}
            if entry and (status.get("completed") or status.get("status_str") in ("success", "error")):
                if raise_on_error and status.get("status_str") == "error":
                    raise ComfyExecutionError(prompt_id, entry)
                return entry
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"prompt {prompt_id} not finished after {timeout:.0f}s; queue: {self.queue_state()}\n"
                    f"--- server log (tail) ---\n{self.log_text()[-5000:]}"
                )
            time.sleep(poll)

    def run(self, prompt: dict, timeout: float = 300.0, client_id: str | None = None) -> dict:
        """queue() + wait()."""
        return self.wait(self.queue(prompt, client_id=client_id), timeout=timeout)

    def view(self, filename: str, subfolder: str = "", type: str = "output") -> bytes:
        """GET /view?filename=..&subfolder=..&type=output|input|temp -> file bytes."""
        q = urllib.parse.urlencode({"filename": filename, "subfolder": subfolder, "type": type})
        return self._request("GET", "/view?" + q)[1]

    def interrupt(self, prompt_id: str | None = None) -> None:
        """POST /interrupt (global, or only if `prompt_id` is the running prompt)."""
        self.post_json("/interrupt", {"prompt_id": prompt_id} if prompt_id else {})

    def free(self, unload_models: bool = True, free_memory: bool = True) -> None:
        """POST /free: ComfyUI unloads models / frees memory before its next queue step."""
        self.post_json("/free", {"unload_models": unload_models, "free_memory": free_memory})

    @staticmethod
    def new_client_id() -> str:
        return uuid.uuid4().hex


TEST_NODES = Path(__file__).resolve().parent / "comfy_nodes"  # test-only ComfyUI nodes, never part of the pack


class ServerWithTestNodes(ComfyServer):
    """A test server with tests/comfy_nodes as one more custom_nodes folder (ComfyUI's own classes built tiny, tensor
    savers ...).

    One serves every test module that needs it in a pytest session (tests/conftest.py's `test_nodes_server`, one per
    xdist worker); a module's own `server` fixture is `with test_nodes_server.module(prepare) as server`, which gives
    the module the server as a fresh one looks (module()): its own files written while the server runs, nothing of
    the modules before it running, cached, loaded or in the output folder."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.module_log_start = 0  # log_size() when the module now using the server began (module())
        self._installed: dict[str, str] = {}  # "models/..." / "input/..." file -> the prepare that wrote it first

    def _write_model_paths(self) -> None:
        super()._write_model_paths()
        with open(self.extra_model_paths, "a", encoding="utf-8") as f:
            f.write(f"fillscope_test_nodes:\n    custom_nodes: {json.dumps(str(TEST_NODES))}\n")

    @contextlib.contextmanager
    def module(self, prepare=None):
        """This server (started if it is not) for one test module, as a server started for it alone would be:

        - settle(): whatever an earlier module left queued or running is stopped, ComfyUI's cached node outputs are
          dropped (a prompt identical to an earlier module's runs again) and its models unloaded;
        - the output folder is emptied (file names, counters and "no such file" checks as on a new server);
        - `prepare(server)` writes the module's models and input images (install(): into a staging folder first,
          then moved in; a file another module already wrote must have the same bytes, else ComfyServerError);
        - `module_log_start`: where the module's part of the log begins (log_text(since=server.module_log_start)).

        A server that an earlier module's test ended is started again first (on the same folders, the old log kept as
        server-<n>.log), as that module's own server would have gone with it. On leaving: /free, so the module's models
        do not stay loaded while later modules run."""
        if self.proc is not None and not self.alive():
            self.stop()
            if self.log_path.is_file():
                kept = len(list(self.workdir.glob("server-*.log")))
                self.log_path.rename(self.log_path.with_name(f"server-{kept}.log"))
            self.port = free_port()
            self.url = f"http://{self.host}:{self.port}"
        self.start()
        self.settle()
        self.clear_output()
        if prepare is not None:
            self.install(prepare)
        self.module_log_start = self.log_size()
        try:
            yield self
        finally:
            if self.alive():
                self.free()

    def settle(self, timeout: float = 600.0) -> None:
        """Stop what is queued or running, then /free (unload the models, drop every cached node output) and wait
        until that took effect: ComfyUI's prompt worker handles /free's flags after its current prompt and before it
        takes the next one, so once one more prompt has finished, any prompt queued after it runs on a fresh cache."""
        self.post_json("/queue", {"clear": True})
        self.interrupt()
        self.free()
        marker = {"img": {"class_type": "EmptyImage",
                          "inputs": {"width": 8, "height": 8, "batch_size": 1, "color": 0x5E771E}},
                  "out": {"class_type": "PreviewImage", "inputs": {"images": ["img", 0]}}}
        self.run(marker, timeout=timeout)

    def clear_output(self) -> None:
        for entry in self.output_dir.iterdir() if self.output_dir.is_dir() else ():
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def install(self, prepare) -> None:
        """Run `prepare(staged)` on a staging folder (`staged.models_dir` with the model folders, `staged.input_dir`;
        nothing else of the server), then move what it wrote into the server's models and input folders. ComfyUI sees
        a file added to a folder while it runs (folder_paths checks the folders' mtimes, FillScope's menus walk them).
        A file that is already there (another module wrote it) must have the very same bytes: it is left as it is (a
        file the server may have mapped is never rewritten); a different one raises ComfyServerError naming both
        prepares, so that one of them is renamed. Checked before anything moves."""
        import filecmp
        import types

        who = f"{getattr(prepare, '__module__', '?')}.{getattr(prepare, '__qualname__', repr(prepare))}"
        staging = Path(tempfile.mkdtemp(prefix="prepare-", dir=self.workdir))
        try:
            staged = types.SimpleNamespace(models_dir=staging / "models", input_dir=staging / "input")
            for folder in MODEL_FOLDERS:
                (staged.models_dir / folder).mkdir(parents=True)
            staged.input_dir.mkdir()
            prepare(staged)
            moves, conflicts = [], []
            for top, target in (("models", self.models_dir), ("input", self.input_dir)):
                target.mkdir(parents=True, exist_ok=True)
                for src in sorted((staging / top).rglob("*")):  # a folder before what is in it
                    rel = f"{top}/{src.relative_to(staging / top).as_posix()}"
                    dst = target / src.relative_to(staging / top)
                    if src.is_symlink() or not (src.is_dir() or src.is_file()):
                        raise ComfyServerError(f"{who} wrote {rel}, neither a folder nor a file")
                    if src.is_dir():
                        if dst.exists() and not dst.is_dir():
                            conflicts.append(f"{rel} (a folder here, a file of {self._installed.get(rel, '?')})")
                        else:
                            moves.append((None, dst, rel))
                    elif not dst.exists():
                        moves.append((src, dst, rel))
                    elif not (dst.is_file() and filecmp.cmp(src, dst, shallow=False)):
                        conflicts.append(f"{rel} (first written by {self._installed.get(rel, '?')})")
            if conflicts:
                raise ComfyServerError(
                    f"{who} writes files that another test module on this shared server wrote with other contents; "
                    "give one of them another name:\n  " + "\n  ".join(conflicts))
            for src, dst, rel in moves:
                if src is None:
                    dst.mkdir(exist_ok=True)
                else:
                    os.replace(src, dst)  # one rename: the server never sees half a file
                    self._installed[rel] = who
        finally:
            shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def server_with_test_nodes(prepare=None):
    """A started ServerWithTestNodes of its own, `prepare(server)` run first (models, inputs), cleaned up afterwards;
    skipped where ComfyUI is not installed (a failure under CI, tests/conftest.py). Test modules share one instead
    (tests/conftest.py's `test_nodes_server` and ServerWithTestNodes.module)."""
    import pytest

    if not comfyui_installed():
        pytest.skip(f"ComfyUI not installed at {comfyui_path()} (run `make setup` or set COMFYUI_PATH)")
    server = ServerWithTestNodes()
    try:
        if prepare is not None:
            prepare(server)
        server.start()
        yield server
    finally:
        server.cleanup()
