"""The ``trainchaos`` command line: exit codes, error output, help, and "bad input starts nothing".

Most tests run in-process: ``CliRunner`` on ``chaos.cli.cli`` for output, or ``chaos.cli.main``
(which maps exceptions to exit codes) with ``sys.argv`` patched. A few run the installed
entry point as a subprocess, because that is what a user and a CI job see: the exit code of
the real process. Each subprocess gets its own ``TRAINCHAOS_STATE_DIR`` so that it can never
see (or register into) the state of other runs on this machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.cli import cli, main
from chaos.errors import EXIT_BAD_INPUT, EXIT_OK, ScenarioError
from chaos.faults.base import known_types
from chaos.model.types import literal_values, unwrap
from chaos.scenario.load import load_scenario

REPO = Path(__file__).resolve().parents[2]
BAD = REPO / "tests" / "scenarios" / "bad"
BAD_FILES = sorted(BAD.glob("*.yaml"))
SMOKE = REPO / "scenarios" / "smoke"
GOOD_SCENARIO = SMOKE / "kill-rank.yaml"
_SCRIPT = Path(sys.executable).with_name("trainchaos")
TRAINCHAOS = [str(_SCRIPT)] if _SCRIPT.exists() else [
    sys.executable, "-c", "import sys; from chaos.cli import main; sys.argv[0] = 'trainchaos'; main()"]
"""The installed entry point ``trainchaos = chaos.cli:main`` next to this interpreter."""

# A few rows spelled out in full: the exact line a user reads for these files.
EXACT_LINES = {
    "wrong_type.yaml": "topology.nodes: expected int, got str 'two'",
    "rank_out_of_range.yaml": "faults[0].target.rank: rank 7 does not exist: the job has 4 ranks (0-3)",
    "malformed_yaml.yaml": "line 3, column 7: invalid YAML",
    "unknown_fault_type.yaml": "faults[0].type: unknown fault type 'kil_rank'; did you mean 'kill_rank'?",
}


def test_there_are_bad_scenarios_to_check() -> None:
    assert len(BAD_FILES) >= 20, f"expected the malformed scenarios in {BAD}"


# --------------------------------------------------------------------------- helpers


def _main(argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run ``chaos.cli.main`` in-process; returns (exit code, stdout, stderr).

    The console script does ``sys.exit(main())``: a normal return is exit code 0.
    """
    monkeypatch.setattr(sys, "argv", ["trainchaos", *argv])
    code: object = 0
    try:
        main()
    except SystemExit as exc:
        code = 0 if exc.code is None else exc.code
    out, err = capsys.readouterr()
    assert isinstance(code, int), f"exit code {code!r} is not an int"
    return code, out, err


def _subprocess(argv: list[str], tmp_path: Path, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["TRAINCHAOS_STATE_DIR"] = str(tmp_path / "state")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return subprocess.run([*TRAINCHAOS, *argv], env=env, cwd=cwd or REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _processes_with_env(entry: str) -> list[int]:
    """Pids whose environment holds ``entry`` exactly (e.g. ``TRAINCHAOS_STATE_DIR=/tmp/x``)."""
    needle = entry.encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as fh:
                env = fh.read().split(b"\0")
        except OSError:
            continue
        if needle in env:
            found.append(int(name))
    return found


def _assert_nothing_started(tmp_path: Path, out_dir: Path | None = None) -> None:
    state = tmp_path / "state"
    assert not _processes_with_env(f"TRAINCHAOS_STATE_DIR={state}"), "a process of the rejected run is alive"
    registered = list((state / "active").glob("*.json")) if (state / "active").exists() else []
    assert not registered, f"a run was registered as active: {registered}"
    if out_dir is not None:
        assert not out_dir.exists(), f"the run directory {out_dir} was created for bad input"
    written = [p for p in tmp_path.rglob("*") if p.name == "events" or p.suffix in (".jsonl", ".json", ".log")]
    assert not written, f"a rejected run wrote files: {written}"


# --------------------------------------------------------------------------- validate


@pytest.mark.parametrize("path", BAD_FILES, ids=[p.name for p in BAD_FILES])
def test_validate_bad_scenario_exits_2_naming_file_and_location(
    path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(str(path))
    issues = info.value.issues

    code, out, err = _main(["validate", str(path)], monkeypatch, capsys)

    assert code == EXIT_BAD_INPUT
    assert "ok " not in out, "a rejected scenario must not be reported valid"
    for issue in issues:
        # file: location: message, one line per problem (the file alone when the whole
        # document is wrong, e.g. a list at the top level).
        where = f"{path}: {issue.location}: " if issue.location else f"{path}: "
        assert f"{where}{issue.message}" in err, f"missing {where!r} in:\n{err}"
    if path.name in EXACT_LINES:
        assert f"{path}: {EXACT_LINES[path.name]}" in err
    assert "Traceback" not in err and "internal error" not in err


def test_every_bad_scenario_but_one_error_has_a_location() -> None:
    """A message without a location is only acceptable when the whole document is wrong."""
    without = []
    for path in BAD_FILES:
        with pytest.raises(ScenarioError) as info:
            load_scenario(str(path))
        without += [f"{path.name}: {i.message}" for i in info.value.issues if not i.location]
    assert all(w.startswith("top_level_list.yaml") for w in without), without


def test_validate_all_bad_files_at_once_lists_every_file_exit_2(tmp_path: Path) -> None:
    """The real entry point: every file's problems are reported in one go, not only the first."""
    result = _subprocess(["validate", *map(str, BAD_FILES)], tmp_path)
    assert result.returncode == EXIT_BAD_INPUT, result.stderr
    for path in BAD_FILES:
        assert f"{path}:" in result.stderr, f"{path.name} not reported"
    assert "Traceback" not in result.stderr


def test_validate_smoke_scenarios_exits_0(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(["validate", str(SMOKE)], monkeypatch, capsys)
    assert code == EXIT_OK, err
    assert "ok  kill-rank" in out
    assert "scenario(s) valid" in out


def test_validate_smoke_via_cli_runner() -> None:
    result = CliRunner().invoke(cli, ["validate", str(SMOKE)])
    assert result.exit_code == 0, result.output
    assert f"({GOOD_SCENARIO})" in result.output
    assert "1 fault(s), 2x2 ranks" in result.output


def test_validate_good_and_bad_together_fails(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    bad = BAD / "wrong_type.yaml"
    code, out, err = _main(["validate", str(GOOD_SCENARIO), str(bad)], monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT
    assert f"{bad}: topology.nodes:" in err


# --------------------------------------------------------------------------- run: bad input starts nothing


def test_run_bad_scenario_exits_2_and_starts_nothing(tmp_path: Path) -> None:
    bad = BAD / "rank_out_of_range.yaml"
    out_dir = tmp_path / "out"
    result = _subprocess(["run", str(bad), "--out", str(out_dir)], tmp_path)
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert f"{bad}: faults[0].target.rank: rank 7 does not exist" in result.stderr
    _assert_nothing_started(tmp_path, out_dir)


def test_run_good_and_bad_scenario_starts_not_even_the_good_one(tmp_path: Path) -> None:
    """Validation of the whole suite comes before the first run: the good file must not run."""
    bad = BAD / "param_not_in_choices.yaml"
    work = tmp_path / "cwd"
    work.mkdir()
    # No --out: the default reports/<suite> relative to the working directory must not appear.
    result = _subprocess(["run", str(GOOD_SCENARIO), str(bad)], tmp_path, cwd=work, timeout=60)
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert f"{bad}: faults[0].params.signal:" in result.stderr
    assert not (work / "reports").exists()
    _assert_nothing_started(tmp_path)


def test_run_nonexistent_path_exits_2(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-scenario.yaml"
    out_dir = tmp_path / "out"
    result = _subprocess(["run", str(missing), "--out", str(out_dir)], tmp_path)
    assert result.returncode == EXIT_BAD_INPUT, result.stdout + result.stderr
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr
    _assert_nothing_started(tmp_path, out_dir)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["run"], "Missing argument"),
        (["validate"], "Missing argument"),
        (["run", str(GOOD_SCENARIO), "--repeat", "0"], "--repeat"),
        (["run", str(GOOD_SCENARIO), "--seed", "-1"], "--seed"),
        (["run", str(GOOD_SCENARIO), "--no-such-option"], "No such option"),
        (["no-such-command"], "No such command"),
    ],
    ids=["run-no-path", "validate-no-path", "repeat-0", "negative-seed", "unknown-option", "unknown-command"],
)
def test_usage_errors_exit_2_and_point_at_help(
    argv: list[str], fragment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    code, out, err = _main(argv, monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT
    assert fragment in err
    assert "--help" in err
    assert not (tmp_path / "reports").exists()


# --------------------------------------------------------------------------- faults


def _fault_blocks(output: str) -> dict[str, list[str]]:
    blocks: dict[str, list[str]] = {}
    for chunk in output.strip().split("\n\n"):
        lines = chunk.strip("\n").splitlines()
        blocks[lines[0].split()[0]] = lines
    return blocks


def test_faults_lists_every_registered_type_with_params_and_fidelity() -> None:
    result = CliRunner().invoke(cli, ["faults"])
    assert result.exit_code == 0, result.output
    types = known_types()
    assert {"kill_rank", "kill_node", "hang_rank"} <= set(types)
    blocks = _fault_blocks(result.output)
    assert set(blocks) == set(types), "every registered type, and nothing else"
    for name, cls in types.items():
        block = blocks[name]
        header = block[0]
        assert cls.family in header and cls.failure_class in header
        for kind in cls.target_keys or cls.target_kinds:
            assert f"targets: {cls.describe_targets()};" in header and kind in header
        assert f"    {cls.summary}" in block
        for param, info in cls.params_model.model_fields.items():
            assert any(line.startswith(f"    param {param} (") for line in block), f"{name}: param {param} missing"
            choices = literal_values(unwrap(info.annotation)[0])
            if choices:
                assert any(all(str(c) in line for c in choices) for line in block if f"param {param} " in line)
        fidelity = [line for line in block if line.startswith("    fidelity: ")]
        assert len(fidelity) == 1, f"{name}: one fidelity line expected"
        first_sentence = fidelity[0].removeprefix("    fidelity: ")
        assert len(first_sentence) > 20 and cls.fidelity.startswith(first_sentence.rstrip("."))


def test_faults_verbose_prints_fidelity_in_full() -> None:
    result = CliRunner().invoke(cli, ["faults", "--verbose"])
    assert result.exit_code == 0, result.output
    for name, cls in known_types().items():
        assert f"    fidelity: {cls.fidelity}" in result.output, name
    # "Does not prove" is the point of a fidelity statement; the short form may omit it.
    assert "Does not prove" in result.output


# --------------------------------------------------------------------------- help and version


@pytest.mark.parametrize("command", sorted(cli.commands))
def test_help_of_each_command(command: str) -> None:
    cmd = cli.commands[command]
    for flag in ("--help", "-h"):
        result = CliRunner().invoke(cli, [command, flag])
        assert result.exit_code == 0, result.output
        assert f" {command} [OPTIONS]" in result.output.splitlines()[0]
        assert " ".join((cmd.help or "").split())[:40] in " ".join(result.output.split())
        for param in cmd.params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("-"):
                    assert opt in result.output, f"{command}: option {opt} not in help"


def test_top_level_help_lists_every_command() -> None:
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for command in ("run", "validate", "faults", "cleanup"):
        assert command in cli.commands
        assert f"  {command}" in result.output


def test_help_and_version_exit_0_through_main(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(["run", "--help"], monkeypatch, capsys)
    assert code == 0 and "run [OPTIONS] PATHS..." in out
    code, out, _ = _main(["--version"], monkeypatch, capsys)
    assert code == 0 and out.startswith("trainchaos")


def test_cleanup_with_nothing_registered(own_machine: Path) -> None:
    # In-process: a `trainchaos cleanup` subprocess would sweep the whole machine (see own_machine).
    result = CliRunner().invoke(cli, ["cleanup"])
    assert result.exit_code == EXIT_OK, result.output
    assert "nothing to clean up" in result.output


def test_dry_run_prints_the_seeded_plan_and_starts_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", str(SMOKE), str(REPO / "tests" / "scenarios" / "good"), "--dry-run", "--out", str(out)]
    first = CliRunner().invoke(cli, args)
    assert first.exit_code == EXIT_OK, first.output
    assert "f0-kill_rank: kill_rank on rank 3, at step 70" in first.output
    assert "with a fault-free baseline" in first.output
    assert "dry run: nothing was started" in first.output
    # the same seed gives the same plan, random and Poisson draws included
    assert CliRunner().invoke(cli, args).output == first.output
    other_seed = CliRunner().invoke(cli, [*args, "--seed", "12345"])
    assert other_seed.exit_code == EXIT_OK and other_seed.output != first.output
    assert not out.exists()
    _assert_nothing_started(tmp_path)


@pytest.mark.parametrize("command", [["validate", "--preflight"], ["run", "--dry-run"]])
def test_preflight_on_a_docker_scenario_with_no_engine_is_one_line_exit_2(
        command: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    code, out, err = _main([*command, str(REPO / "scenarios" / "docker" / "kill-rank.yaml")],
                           monkeypatch, capsys)
    assert code == EXIT_BAD_INPUT, (out, err)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1 and "kill-rank.yaml: backend: docker: " in lines[0], lines
    # without --preflight, validate checks the file only (it is valid)
    code, out, _ = _main(["validate", str(REPO / "scenarios" / "docker" / "kill-rank.yaml")],
                         monkeypatch, capsys)
    assert code == EXIT_OK and "1 scenario(s) valid" in out


def test_dry_run_prints_each_faults_resolved_params() -> None:
    result = CliRunner().invoke(cli, ["run", str(SMOKE / "kill-rank.yaml"), "--dry-run"])
    assert result.exit_code == EXIT_OK, result.output
    assert "      params: signal=SIGKILL" in result.output
