"""The compose services' own processes, run as the images run them, without Docker.

No container runtime runs on these machines, so each service's command (read from
docker-compose.yml through a real Compose implementation) runs as a process that looks to
itself like its container in the ways that matter to Spark and seglog:

- the images' user, uid/gid 10001 (``setpriv``), with a passwd/group entry as the image's
  ``useradd`` makes (Hadoop's login, inside Spark, needs a user name);
- the image's environment, read from the Dockerfile's ``ENV`` lines, then compose's
  ``environment:``; image paths translated into a per-test image root (``ImageRoot``), where the
  directories the Dockerfile creates are created and owned by 10001 as in the image. Everything
  else (SPARK_HOME inside site-packages, the interpreter) is root's and read-only to 10001, as in
  the image;
- compose's network names: a private mount namespace binds a hosts file naming every service
  (``spark-master``, ``seglog``, ``cleaner``...) at 127.0.0.1 over /etc/hosts, and a private UTS
  namespace gives the process its service's hostname, as compose's DNS and ``hostname:`` do.
  Fixed ports (7077, 8080, 50551) become free ones, since the services share one network here.

Needs root (CI runs as root): ``needs_root`` says why a test skips otherwise.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from tests.support.integration_helpers import ServiceProcess
from tests.support.ports import free_port

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy" / "cleaner.Dockerfile"
SEGLOG_DOCKERFILE = ROOT / "deploy" / "seglog.Dockerfile"
IMAGE_UID = 10001
IMAGE_USER = "seglog"
SERVICE_NAMES = ("seglog", "prometheus", "grafana", "spark-master", "spark-worker", "cleaner", "s3")
# A JVM start on a loaded 2-core machine can take a minute; registration follows it.
REGISTER_TIMEOUT_S = 120

needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("setpriv") or not shutil.which("unshare"),
    reason="running the services as the images' uid 10001 in their own namespaces needs root, setpriv and unshare",
)


def compose_services(*files: str, env: dict[str, str] | None = None) -> dict:
    """The normalised services of docker-compose.yml (and overrides), as Compose reads them
    (``env``: the variables an override requires, as an ``.env`` file would give them)."""
    arguments = [str(pathlib.Path(sys.executable).parent / "docker-compose")]
    for name in files or ("docker-compose.yml",):
        arguments += ["-f", str(ROOT / name)]
    result = subprocess.run([*arguments, "config", "--format", "json"], capture_output=True, text=True,
                            cwd=ROOT, env={"PATH": "/usr/bin:/bin", **(env or {})}, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["services"]


def _instructions(dockerfile: pathlib.Path, keyword: str) -> list[str]:
    """The text of each `keyword` instruction, continuation lines joined."""
    found, current = [], None
    for line in dockerfile.read_text().splitlines():
        if current is None:
            if not line.startswith(keyword + " "):
                continue
            current = line[len(keyword) + 1:]
        else:
            current += " " + line.strip()
        if current.endswith("\\"):
            current = current[:-1]
            continue
        found.append(current)
        current = None
    return found


def image_environment(dockerfile: pathlib.Path = DOCKERFILE) -> dict[str, str]:
    """The Dockerfile's ENV, in order, ``${VAR}`` expanded as Docker does (PATH from the base image)."""
    environ = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
    for text in _instructions(dockerfile, "ENV"):
        for word in shlex.split(text):
            name, _, value = word.partition("=")
            environ[name] = re.sub(r"\$\{(\w+)\}", lambda m: environ.get(m.group(1), ""), value)
    return environ


def image_directories(dockerfile: pathlib.Path = DOCKERFILE) -> list[str]:
    """Directories the Dockerfile's RUN lines create (``mkdir -p``), and the user's home."""
    found = []
    for text in _instructions(dockerfile, "RUN"):
        for command in text.split("&&"):
            words = shlex.split(command)
            if words[:2] == ["mkdir", "-p"]:
                found += words[2:]
            if words and words[0] == "useradd" and "--home-dir" in words:
                found.append(words[words.index("--home-dir") + 1])
    return found


class ImageRoot:
    """A directory standing for the image's filesystem: the paths the Dockerfile creates live
    under it, owned by 10001; the interpreter and Spark are this machine's (root's, read-only)."""

    def __init__(self) -> None:
        # Not under pytest's tmp_path: that is root's and closed to other users (0700).
        self.path = pathlib.Path(tempfile.mkdtemp(prefix="seglog-image-"))
        self.path.chmod(0o755)
        from pyspark.find_spark_home import _find_spark_home

        self.spark_home = _find_spark_home()
        image_env = image_environment()
        self._fixed = {image_env["SPARK_HOME"]: self.spark_home, image_env["PYSPARK_PYTHON"]: sys.executable}
        for directory in image_directories():
            self.create(directory)
        self.etc = self.path / "etc"
        self.etc.mkdir()
        self._write_etc()

    def create(self, image_path: str) -> pathlib.Path:
        """An image directory owned by 10001, as the Dockerfile's mkdir + chown leave it."""
        host = pathlib.Path(self.translate(image_path))
        host.mkdir(parents=True, exist_ok=True)
        for part in [host, *host.parents]:
            if part == self.path:
                break
            os.chown(part, IMAGE_UID, IMAGE_UID)
            part.chmod(0o755)
        return host

    def translate(self, value: str) -> str:
        """An image path (or a PATH-like list of them) as a path on this machine."""
        if ":" in value and not value.startswith(("spark://", "local")):
            return ":".join(self.translate(part) for part in value.split(":"))
        for image_path, host_path in self._fixed.items():
            if value == image_path or value.startswith(image_path + "/"):
                return host_path + value[len(image_path):]
        if value.startswith(("/tmp/", "/var/lib/", "/home/")) and not value.startswith(str(self.path)):
            return str(self.path) + value
        return value

    def environment(self, compose_env: dict[str, str] | None = None, *, dockerfile: pathlib.Path = DOCKERFILE,
                    **extra: str) -> dict[str, str]:
        """The image's ENV then compose's, translated; this machine's PATH after the image's."""
        environ = {name: self.translate(value) for name, value in image_environment(dockerfile).items()}
        environ["PATH"] = environ["PATH"] + ":" + os.environ.get("PATH", "")
        environ.update({name: self.translate(value) for name, value in (compose_env or {}).items()})
        environ.update(extra)
        return environ

    def _write_etc(self) -> None:
        home = self.translate("/home/seglog")
        passwd = pathlib.Path("/etc/passwd").read_text()
        group = pathlib.Path("/etc/group").read_text()
        (self.etc / "passwd").write_text(passwd + f"{IMAGE_USER}:x:{IMAGE_UID}:{IMAGE_UID}::{home}:/usr/sbin/nologin\n")
        (self.etc / "group").write_text(group + f"{IMAGE_USER}:x:{IMAGE_UID}:\n")
        (self.etc / "hosts").write_text("127.0.0.1 localhost " + " ".join(SERVICE_NAMES) + "\n")

    def as_service(self, hostname: str, command: list[str]) -> list[str]:
        """`command` as the images run it: uid 10001, the service's hostname, compose's names."""
        script = ('mount --bind "$0/hosts" /etc/hosts && mount --bind "$0/passwd" /etc/passwd'
                  ' && mount --bind "$0/group" /etc/group && hostname "$1" && shift'
                  f'{self._open_interpreter()}'
                  f' && exec setpriv --reuid {IMAGE_UID} --regid {IMAGE_UID} --clear-groups -- "$@"')
        return ["unshare", "--mount", "--uts", "--propagation", "private", "--", "sh", "-c", script,
                str(self.etc), hostname, *command]

    def _open_interpreter(self) -> str:
        """Shell steps that make this machine's interpreter reachable by 10001, as the image's
        /usr/local/bin/python is: when it lives under a directory closed to other users (a
        pyenv under /root), that directory is replaced, in the service's mount namespace only, by
        an open one holding just the interpreter's tree."""
        path = pathlib.Path(os.path.realpath(sys.executable))
        for closed in reversed(path.parents):
            if closed.stat().st_mode & 0o001 == 0:
                break
        else:
            return ""
        inner = closed / path.relative_to(closed).parts[0]
        keep = self.path / "interpreter"
        keep.mkdir(exist_ok=True)
        return (f" && mount --bind {shlex.quote(str(inner))} {shlex.quote(str(keep))}"
                f" && mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(closed))}"
                f" && mkdir {shlex.quote(str(inner))} && mount --move {shlex.quote(str(keep))} {shlex.quote(str(inner))}")

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def replace(words: list[str], old: str, new: str) -> list[str]:
    return [word.replace(old, new) for word in words]


def wait_for(path: pathlib.Path, text: str, process: subprocess.Popen, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} not seen in {path} (exit {process.poll()}):\n"
                         f"{path.read_text(errors='replace')[-3000:] if path.exists() else ''}")


class Processes:
    """Started processes, each logging to a file; stopped in reverse order."""

    def __init__(self, log_dir: pathlib.Path) -> None:
        self.log_dir = log_dir
        self.running: list[subprocess.Popen] = []

    def start(self, name: str, command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, pathlib.Path]:
        log_path = self.log_dir / f"{name}.log"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                       env=env, cwd=self.log_dir)
        self.running.append(process)
        return process, log_path

    def stop(self) -> None:
        for process in reversed(self.running):
            if process.poll() is None:
                process.terminate()
        for process in reversed(self.running):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class SparkCluster:
    """compose's spark-master and spark-worker, as uid 10001, on free loopback ports."""

    def __init__(self, image: ImageRoot, processes: Processes, services: dict) -> None:
        self.image = image
        self.processes = processes
        self.services = services
        self.master_port = free_port()
        # What compose's other services use to reach the master (the name resolves to loopback).
        self.master_url = f"spark://spark-master:{self.master_port}"

    def spark_command(self, service: str) -> list[str]:
        command = self.services[service]["command"]
        assert command[0] == "spark-class", command  # found on the image's PATH
        return command

    def start(self) -> SparkCluster:
        return self.start_master().start_worker(self.image, self.processes, self.services)

    def start_master(self) -> SparkCluster:
        master = self.spark_command("spark-master")
        master = replace(replace(master, "7077", str(self.master_port)), "8080", str(free_port()))
        env = self.image.environment(self.services["spark-master"].get("environment"))
        process, log = self.processes.start("spark-master", self.image.as_service("spark-master", master), env)
        wait_for(log, "I have been elected leader", process, REGISTER_TIMEOUT_S)
        return self

    def start_worker(self, image: ImageRoot, processes: Processes, services: dict) -> SparkCluster:
        """A spark-worker as ``services`` (one topology's compose files) run it, in ``image`` (where
        its volumes are), registered with this master; stopped with ``processes``."""
        worker = services["spark-worker"]["command"]
        assert worker[0] == "spark-class", worker  # found on the image's PATH
        worker = replace(worker, "spark-master:7077", f"spark-master:{self.master_port}")
        worker = replace(worker, "2g", "1g")  # two JVMs and a driver share this machine's memory
        # The worker's UI port, fixed at 8081 inside its own container, is a free one here.
        env = image.environment(services["spark-worker"].get("environment"), SPARK_WORKER_WEBUI_PORT=str(free_port()))
        process, log = processes.start("spark-worker", image.as_service("spark-worker", worker), env)
        wait_for(log, "Successfully registered with master", process, REGISTER_TIMEOUT_S)
        return self


class ImageService(ServiceProcess):
    """compose's seglog service as its image runs it: uid 10001, the seglog image's ENV and
    compose's environment, data in the image's /var/lib/seglog (the shared data volume)."""

    def __init__(self, image: ImageRoot, services: dict) -> None:
        workdir = image.create("/var/lib/seglog-service")  # ready files, written by 10001
        env = image.environment(services["seglog"].get("environment"), dockerfile=SEGLOG_DOCKERFILE)
        super().__init__(workdir, [image.create("/var/lib/seglog")], [], env)
        self.image = image

    def command(self) -> list[str]:
        return self.image.as_service("seglog", super().command())


def cleaner_command(services: dict, master_url: str, server_address: str, *, once: bool) -> list[str]:
    """compose's cleaner command, pointed at this service and master; --once for one round."""
    command = services["cleaner"]["command"]
    assert command[0] == "seglog", command
    if once:
        at = command.index("--interval")
        command = command[:at] + ["--once"] + command[at + 2:]
    port = server_address.rsplit(":", 1)[1]
    command = replace(replace(command, "seglog:50551", f"seglog:{port}"), "spark://spark-master:7077", master_url)
    return [sys.executable, "-m", "seglog_cli", *command[1:]]
