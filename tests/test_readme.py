"""README.md and docs/*.md as a user meets them: a short front door, links that land, commands that run.

Rules:
- README.md has at most 150 lines and links every docs/*.md page. Every relative link in README.md and
  docs/*.md names an existing file, and a ``#anchor`` names a heading of the target page (GitHub's slugs).
- Shell blocks are fenced ```sh. Any other shell info string (bash, console, shell, shell-session, zsh) fails
  the test, so no shell block escapes these checks.
- README's ```sh blocks run in order, each as ``bash -e -o pipefail -c BLOCK`` with the repository root as
  working directory and ``.venv/bin`` first on PATH (where ``make install`` puts ``groupcoord``), against one
  fresh ``groupcoord serve`` the test starts with the defaults ``make run`` uses, except that it listens on
  free 127.0.0.1 ports with a temporary data dir. The only edit to a block: ``localhost:9092`` and
  ``127.0.0.1:9092`` become that server's address, ``localhost:9404`` and ``127.0.0.1:9404`` its metrics
  address. A block is left out only when the line right before its fence is ``<!-- not-run: REASON -->``
  (visible in the README), e.g. the ``make run`` / ``make test`` block: the server is the one the test
  started. At least 6 blocks must run; each must exit 0 within 60 s (its whole process group is killed
  otherwise), and the walk-through's outputs are checked (the records consumed, the groups' committed
  offsets and lag, the metrics).
- In every ```sh block of README.md and docs/*.md, each ``groupcoord SUBCOMMAND [SUBSUBCOMMAND]`` exists
  (its ``--help`` exits 0) and each option it is given appears in that help; each ``make TARGET`` (also in
  inline code such as `make bench ARGS=retry`) is a target of the Makefile.
- Every ``groupcoord_*`` metric docs/metrics.md names is declared in coordinator/metrics.py.
- Configuration keys: every key of a ``| key | default | ...`` table in docs/*.md is a ``groupcoord serve``
  flag and its default cell starts with the default ``groupcoord serve --help`` prints ("empty" for an
  empty one); every backticked key and every key of a ```toml block in docs/configuration.md is a flag.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from server_process import ServerProcess  # noqa: E402

README = REPO / "README.md"
DOCS = REPO / "docs"
VENV_BIN = REPO / ".venv" / "bin"
MAX_README_LINES = 150
MIN_BLOCKS_RUN = 6
BLOCK_TIMEOUT_S = 60
HELP_TIMEOUT_S = 30
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)\s*$")  # also indented, in list items
SHELL_INFO = {"sh"}
OTHER_SHELL_INFO = {"bash", "console", "shell", "shell-session", "zsh", "shellsession"}
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(\S.*?)\s*-->$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
INLINE_CODE = re.compile(r"`([^`]+)`")  # a code span may wrap a line
CONFIG_KEY = re.compile(r"^[a-z][a-z0-9]*(?:\.[a-z0-9]+)+$")
FILE_SUFFIXES = (".toml", ".md", ".py", ".json", ".yml", ".yaml", ".properties", ".pem", ".conf", ".log")


def pages() -> list[Path]:
    return [README, *sorted(DOCS.glob("*.md"))]


def blocks(path: Path) -> Iterator[tuple[str, str, str | None, int]]:
    """(info string, body, not-run reason or None, first line number) of each fenced block of a page."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, info, start = m.group(1), m.group(2).lower(), i
        reason = NOT_RUN.match(lines[i - 1].strip()) if i else None
        body: list[str] = []
        i += 1
        indent = len(lines[start]) - len(lines[start].lstrip())
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][indent:] if lines[i][:indent].isspace() else lines[i])
            i += 1
        i += 1
        yield info, "\n".join(body) + "\n", reason.group(1) if reason else None, start + 1


def prose(path: Path) -> str:
    """The page without its fenced blocks."""
    out, inside = [], None
    for line in path.read_text().splitlines():
        m = FENCE.match(line)
        if inside is None and m:
            inside = m.group(1)
        elif inside is not None and line.strip().startswith(inside):
            inside = None
        elif inside is None:
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*$", prose(path), re.M)}


# ---------------------------------------------------------------- 1. shape and links

def test_readme_is_one_short_page_that_links_every_doc() -> None:
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES})"
    linked = {(README.parent / m.group(1).split("#")[0]).resolve() for m in LINK.finditer(prose(README))}
    missing = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not missing, f"README.md does not link {missing}"


def test_every_relative_link_lands() -> None:
    broken, checked = [], 0
    for page in pages():
        for m in LINK.finditer(prose(page)):
            target = m.group(1)
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            checked += 1
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no heading #{anchor} in {dest.name})")
    assert checked >= 20, f"only {checked} relative links found: is the link pattern right?"
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_shell_blocks_are_fenced_sh() -> None:
    wrong = [f"{page.relative_to(REPO)}:{line} ```{info}" for page in pages()
             for info, _, _, line in blocks(page) if info in OTHER_SHELL_INFO]
    assert not wrong, "shell blocks must be fenced ```sh (the convention this test reads):\n" + "\n".join(wrong)


# ---------------------------------------------------------------- 2. README's walk-through, run as written

def _rows(out: str) -> dict[str, list[list[str]]]:
    """The `groupcoord groups offsets` tables in a block's output: each group's rows (TOPIC PARTITION
    CURRENT-OFFSET LOG-END-OFFSET LAG ...); the other commands' tables are passed over."""
    groups: dict[str, list[list[str]]] = {}
    current, offsets_table = None, False
    for line in out.splitlines():
        words = line.split()
        if words[:1] == ["GROUP"]:
            current, offsets_table = words[1], False
        elif words[:3] == ["TOPIC", "PARTITION", "CURRENT-OFFSET"]:
            offsets_table = True
        elif current and offsets_table and words:
            groups.setdefault(current, []).append(words)
    return groups


def _check_offsets(out: str) -> None:
    groups = _rows(out)
    assert set(groups) == {"billing", "reports"}, out
    total = {g: [sum(int(r[i]) for r in rows) for i in (2, 3, 4)] for g, rows in groups.items()}
    assert total["billing"] == [3, 4, 1], f"billing: committed, log end, lag = {total['billing']}\n{out}"
    assert total["reports"] == [4, 4, 0], f"reports: committed, log end, lag = {total['reports']}\n{out}"


def _check_metrics(out: str) -> None:
    assert 'groupcoord_groups{state="Empty"} 2.0' in out, out
    commits = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("groupcoord_offset_commits_total ")]
    assert commits and commits[0] >= 4, out
    assert 'groupcoord_requests_total{api="OffsetCommit"}' in out, out


RECORDS = {"alice": "1", "bob": "2", "carol": "3"}
# a README block holding the command (first item) must print what the check (second item) wants
OUTPUT_CHECKS: list[tuple[str, Callable[[str], None]]] = [
    ("groupcoord topics describe clicks", lambda out: _expect("PARTITIONS 2" in out, out)),
    ("groupcoord consume clicks --group billing", lambda out: _expect(
        sorted(out.splitlines()) == sorted(f"{k}\t{v}" for k, v in RECORDS.items()), out)),
    ("from kafka import", lambda out: _expect(
        sorted(tuple(line.split()[2:]) for line in out.splitlines())
        == sorted([*RECORDS.items(), ("dave", "4")]), out)),
    ("kcat -b localhost:9092 -C", lambda out: _expect(
        sorted(line.split(": ", 1)[1] for line in out.splitlines())
        == sorted([*(f"{k}={v}" for k, v in RECORDS.items()), "dave=4"]), out)),
    ("groupcoord groups describe billing", lambda out: _expect("STATE Empty" in out, out)),
    ("groupcoord groups offsets billing reports", _check_offsets),
    ("curl -s http://localhost:9404/metrics", _check_metrics),
]


def _expect(ok: bool, out: str) -> None:
    assert ok, f"unexpected output:\n{out}"


def run_block(body: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen(["bash", "-e", "-o", "pipefail", "-c", body], cwd=REPO, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the block's processes and nothing else
        out, err = proc.communicate(timeout=10)
        pytest.fail(f"block did not finish in {BLOCK_TIMEOUT_S} s:\n{body}\nstdout:\n{out}\nstderr:\n{err}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    assert (VENV_BIN / "groupcoord").exists(), "no .venv/bin/groupcoord: run make install"
    shell = [(body, reason, line) for info, body, reason, line in blocks(README) if info in SHELL_INFO]
    to_run = [(body, line) for body, reason, line in shell if reason is None]
    assert len(to_run) >= MIN_BLOCKS_RUN, f"only {len(to_run)} README sh blocks run (at least {MIN_BLOCKS_RUN})"
    checks = {needle: [line for body, line in to_run if needle in body] for needle, _ in OUTPUT_CHECKS}
    assert all(len(found) == 1 for found in checks.values()), f"each checked command in one run block: {checks}"

    server = ServerProcess(tmp_path / "data").start()
    try:
        server.wait_loaded()
        env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
        for body, line in to_run:
            script = body
            for host in ("localhost", "127.0.0.1"):
                script = script.replace(f"{host}:9092", server.bootstrap)
                script = script.replace(f"{host}:9404", f"127.0.0.1:{server.metrics_port}")
            done = run_block(script, env)
            assert done.returncode == 0, (f"README.md:{line} exited {done.returncode}:\n{body}\nstdout:\n"
                                          f"{done.stdout}\nstderr:\n{done.stderr}\nserver:\n{server.log()[-3000:]}")
            for needle, check in OUTPUT_CHECKS:
                if needle in body:
                    check(done.stdout)
    finally:
        server.stop()


# ---------------------------------------------------------------- 3. commands, make targets, config keys

def _commands(body: str) -> Iterator[list[str]]:
    """Each simple command of a shell block, as words (heredoc bodies and comments left out)."""
    text = re.sub(r"\\\n", " ", body)
    lines, heredoc = [], None
    for line in text.splitlines():
        if heredoc:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        m = re.search(r"<<-?\s*'?\"?(\w+)", line)
        heredoc = m.group(1) if m else None
        lines.append(line)
    for line in lines:
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words: list[str] = []
        for token in lexer:
            if set(token) <= set("|&;()<>"):
                if words:
                    yield words
                words = []
            else:
                words.append(token)
        if words:
            yield words


def _program(words: list[str], name: str) -> list[str] | None:
    """The words after ``name`` (or ``path/name``) in a command, else None."""
    for i, w in enumerate(words):
        if w == name or w.endswith("/" + name):
            return words[i + 1:]
    return None


@cache
def _help(*sub: str) -> str:
    done = subprocess.run([str(VENV_BIN / "groupcoord"), *sub, "--help"], capture_output=True, text=True,
                          timeout=HELP_TIMEOUT_S, cwd=REPO, env=dict(os.environ, COLUMNS="10000"), check=False)
    assert done.returncode == 0, f"groupcoord {' '.join(sub)} --help exited {done.returncode}: {done.stderr}"
    return done.stdout


def _subcommands(help_text: str) -> set[str]:
    m = re.search(r"^positional arguments:\n\s+\{([\w,-]+)\}", help_text, re.M)
    return set(m.group(1).split(",")) if m else set()


def _shell_blocks() -> Iterator[tuple[str, int, str]]:
    for page in pages():
        for info, body, _, line in blocks(page):
            if info in SHELL_INFO:
                yield f"{page.relative_to(REPO)}:{line}", line, body


def test_groupcoord_commands_in_shell_blocks_exist() -> None:
    uses: list[tuple[str, list[str]]] = []
    for where, _, body in _shell_blocks():
        for words in _commands(body):
            args = _program(words, "groupcoord")
            if args and not args[0].startswith("-"):
                uses.append((where, args))
    assert len(uses) >= 40, f"only {len(uses)} groupcoord commands found in sh blocks"
    top = _subcommands(_help())
    firsts = sorted({a[0] for _, a in uses if a[0] in top})
    with ThreadPoolExecutor(8) as pool:  # warm the help cache in parallel: each --help is a process
        list(pool.map(lambda s: _help(s), firsts))
        seconds = {(a[0], a[1]) for _, a in uses if a[0] in top and len(a) > 1 and a[1] in _subcommands(_help(a[0]))}
        list(pool.map(lambda s: _help(*s), sorted(seconds)))
    problems = []
    for where, args in uses:
        if args[0] not in top:
            problems.append(f"{where}: no subcommand {args[0]!r}")
            continue
        cmd = [args[0]]
        subs = _subcommands(_help(args[0]))
        if subs:
            nxt = next((a for a in args[1:] if not a.startswith("-")), None)
            if nxt not in subs:
                problems.append(f"{where}: groupcoord {args[0]} has no subcommand {nxt!r}")
                continue
            cmd.append(nxt)
        text = _help(*cmd)
        for opt in (a.split("=", 1)[0] for a in args if re.match(r"^--?[a-zA-Z]", a)):
            if not re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text):
                problems.append(f"{where}: groupcoord {' '.join(cmd)} has no option {opt}")
    assert not problems, "\n".join(problems)


def _make_targets() -> set[str]:
    targets = set()
    for line in (REPO / "Makefile").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.$()/ -]+?)\s*:(?!=)", line)
        if m and not line.startswith("\t"):
            targets.update(m.group(1).split())
    return targets


def test_make_targets_exist() -> None:
    targets = _make_targets()
    assert {"run", "test", "test-fast", "bench"} <= targets, targets
    uses = []
    for where, _, body in _shell_blocks():
        uses += [(where, args) for words in _commands(body) if (args := _program(words, "make")) is not None]
    for page in pages():
        for m in INLINE_CODE.finditer(prose(page)):
            span = " ".join(m.group(1).split())
            if span.startswith("make "):
                uses.append((str(page.relative_to(REPO)), shlex.split(span)[1:]))
    assert len(uses) >= 15, f"only {len(uses)} make commands found"
    problems = [f"{where}: no make target {a!r}" for where, args in uses for a in args
                if "=" not in a and not a.startswith("-") and a not in targets]
    assert not problems, "\n".join(problems)


@cache
def _serve_defaults() -> dict[str, str]:
    """Flag (without dashes) -> the default ``groupcoord serve --help`` prints."""
    found = dict(re.findall(r"^\s+--([a-z0-9-]+)(?: [A-Z_]+)?\s.*?\(default: (.*)\)$", _help("serve"), re.M))
    assert len(found) > 50, f"could not read serve --help ({len(found)} defaults)"
    return found


def _flag(key: str) -> str:
    return key.replace(".", "-")


def test_config_key_tables_match_serve_help() -> None:
    defaults = _serve_defaults()
    problems, rows = [], 0
    for page in sorted(DOCS.glob("*.md")):
        header = None
        for line in prose(page).splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else None
            if cells is None:
                header = None
            elif header is None:
                header = cells
            elif header[:2] == ["key", "default"] and not set(cells[0]) <= set("-: "):
                rows += 1
                keys = re.findall(r"`([^`]+)`", cells[0])
                want = cells[1].split()[0].strip("`") if cells[1] else ""
                want = "" if want == "empty" else want
                for key in keys or [cells[0]]:
                    if _flag(key) not in defaults:
                        problems.append(f"{page.name}: {key} is not a groupcoord serve key")
                    elif defaults[_flag(key)] != want:
                        problems.append(f"{page.name}: {key} default {want!r}, serve --help says "
                                        f"{defaults[_flag(key)]!r}")
    assert rows >= 40, f"only {rows} key rows found"
    assert not problems, "\n".join(problems)


def _flatten(table: dict[str, object], prefix: str = "") -> Iterator[str]:
    for k, v in table.items():
        if isinstance(v, dict):
            yield from _flatten(v, f"{prefix}{k}.")
        else:
            yield prefix + k


def test_configuration_page_names_only_real_keys() -> None:
    page = DOCS / "configuration.md"
    defaults = _serve_defaults()
    named = {m.group(1) for m in INLINE_CODE.finditer(prose(page))
             if CONFIG_KEY.match(m.group(1)) and not m.group(1).endswith(FILE_SUFFIXES)}
    for info, body, _, _ in blocks(page):
        if info == "toml":
            named.update(_flatten(tomllib.loads(body)))
    assert len(named) >= 40, f"only {len(named)} keys found in {page.name}"
    unknown = sorted(k for k in named if _flag(k) not in defaults)
    assert not unknown, f"{page.name} names keys groupcoord serve --help does not know: {unknown}"


def test_metrics_page_names_only_declared_metrics() -> None:
    declared = set(re.findall(r'"(groupcoord_[a-z_]+)"', (REPO / "coordinator" / "metrics.py").read_text()))
    named = set(re.findall(r"\b(groupcoord_[a-z_]+)", prose(DOCS / "metrics.md")))
    assert len(named) >= 20, f"only {len(named)} metrics named in metrics.md"
    unknown = sorted(n for n in named if n not in declared and n.removesuffix("_total") not in declared)
    assert not unknown, f"docs/metrics.md names metrics coordinator/metrics.py does not declare: {unknown}"
