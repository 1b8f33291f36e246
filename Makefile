# The two commands a new user needs: `make demo` and `make test`. Both set everything up.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
# Debian packages the fault families and their tests need: network namespaces and nftables
# (netns backend), capsh (a test drops CAP_NET_ADMIN), FUSE (storage), chromium (a test
# renders a real run's HTML report, headless), slurm-wlm and munge (a local Slurm cluster),
# docker.io (the docker backend; its tests start a dockerd of their own) only where no docker
# engine is installed: a client alone (e.g. /usr/local/bin/docker) cannot run containers.
DOCKER_DEB := $(if $(and $(shell command -v docker 2>/dev/null),$(shell command -v dockerd 2>/dev/null)),,docker.io)
DEB_PACKAGES := iproute2 nftables fuse3 libfuse3-dev procps libcap2-bin chromium slurm-wlm munge $(DOCKER_DEB)
STAMP := $(VENV)/.installed

.PHONY: install bytecode demo slurm-demo test test-stress test-fuzz test-unit test-integration lint audit bench bench-sigkill bench-compare clean

install: $(STAMP)

# The project's bytecode, written before a run: every controller, agent, zygote and storage
# daemon imports chaos and harness, and where PYTHONDONTWRITEBYTECODE is set (as in this
# machine's environment) no import writes it, so each of the hundreds of processes of a
# `make test` compiled them again (0.1-0.2 s of CPU apiece). compileall writes it whatever
# that variable says; a source edited later is recompiled on import as usual.
bytecode: install
	$(BIN)/python -m compileall -q chaos harness

$(STAMP): pyproject.toml Makefile
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  missing=$$(for p in $(DEB_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	  if [ -n "$$missing" ]; then \
	    echo "installing Debian packages: $$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  fi; \
	else echo "not root: skipping Debian packages ($(DEB_PACKAGES))"; fi
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	# torch first and pinned: an unpinned resolve would pull a multi-GB CUDA build.
	$(BIN)/pip install -q --disable-pip-version-check --no-compile "$(TORCH_PIN)"
	# The stacks' wheels too (their tests run them); the torch pin again, so the resolver keeps it.
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -e '.[dev,stacks]' "$(TORCH_PIN)"
	# The packages' bytecode, on every core: pip compiles file by file on one (49 s of the
	# 92 s these two installs took here, against 27 s so). Without it each process would
	# compile torch on import (PYTHONDONTWRITEBYTECODE, see bytecode). A file that does not
	# compile is left out, as pip leaves it (torch's Python 3.12 syntax test, excluded here).
	$(BIN)/python -m compileall -q -j 0 -x 'torch/testing/_internal/py312_intrinsics\.py' \
	  "$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
	  || echo "the files above did not compile (pip would skip them too)"
	touch $(STAMP)

demo: bytecode
	$(BIN)/trainchaos run scenarios/smoke --out reports/smoke --junit reports/smoke/junit.xml

# A throwaway local Slurm (munge, slurmctld, 4 emulated slurmd under a temp directory),
# the Slurm scenarios against it, then every daemon stopped, also on failure or Ctrl-C.
slurm-demo: install
	$(BIN)/python -m chaos.cluster.slurm_testbed run --nodes 4 -- \
	  $(BIN)/trainchaos run scenarios/slurm --out reports/slurm --junit reports/slurm/junit.xml

# Unit tests first, then the integration tests on TEST_JOBS workers side by side (most of
# an integration test's time is waiting on timeouts, paced steps and restarts, not CPU;
# tests/conftest.py says what stays together). TEST_JOBS=1 runs everything one at a time in
# one process, quickest module first. The slowest 25 are listed at the end, so a test that
# grew past its budget is seen; TIMELINE gets when each test ran on which worker and its CPU (what the
# suite's wall time waited on; tests/conftest.py's MODULE_SECONDS are refreshed from it).
# Four: a third of the integration modules' wall time is waiting with the CPU idle (the Slurm
# testbed, the dockerds, timed-out hangs), which a fourth worker fills.
TEST_JOBS ?= 4
WORKERS = $(if $(filter-out 1,$(TEST_JOBS)),-n $(TEST_JOBS))
TIMELINE ?= reports/test-timeline.tsv
test: bytecode
	$(BIN)/python -m pytest tests -q -p no:cacheprovider --timeout 900 --durations=25 --timeline $(TIMELINE) $(WORKERS)

# Flaky tests are found here before they land: the integration tests on a host whose cores
# are all taken by busy processes, each test STRESS_COUNT times in a row. Narrow it with
# STRESS_TESTS (e.g. make test-stress STRESS_TESTS=tests/integration/test_sdc.py STRESS_COUNT=10).
# The tests run on STRESS_JOBS workers side by side, as `make test` runs them, beside the
# hogs: `make test`'s own load and more. STRESS_JOBS=1 runs them one at a time, for longer.
STRESS_TESTS ?= tests
STRESS_COUNT ?= 2
STRESS_HOGS ?= $(shell nproc)
STRESS_JOBS ?= $(TEST_JOBS)
STRESS_TIMELINE ?= reports/stress-timeline.tsv
test-stress: bytecode
	$(BIN)/python -m pytest $(STRESS_TESTS) -q -p no:cacheprovider -m integration --timeout 1800 \
	  --stress-hogs $(STRESS_HOGS) --count $(STRESS_COUNT) --repeat-scope function \
	  --durations=25 --timeline $(STRESS_TIMELINE) $(if $(filter-out 1,$(STRESS_JOBS)),-n $(STRESS_JOBS))

# The long fuzz soak: FUZZ_EXAMPLES scenario documents drawn from `trainchaos schema` and
# mutated, each through what validate and run --dry-run do (make test runs 1,000 with a fixed
# seed). It prints the documents, rejections by location, escapes and the time per document
# (p50/p99/max); docs/testing.md ("Fuzzing") has the last figures. Exit 1 on any escape.
FUZZ_EXAMPLES ?= 100000
FUZZ_SEED ?= 0
test-fuzz: bytecode
	$(BIN)/python tests/fuzz_soak.py --examples $(FUZZ_EXAMPLES) --seed $(FUZZ_SEED)

test-unit: bytecode
	$(BIN)/python -m pytest tests/unit -q

test-integration: bytecode
	$(BIN)/python -m pytest tests -q -m integration --timeout 900 $(WORKERS)

# The security lint too: bandit over what ships (chaos/, harness/), every finding a failure
# but those pyproject.toml's [tool.bandit] skips and the lines marked `# nosec BXXX` (why:
# docs/security.md). About 7 s.
lint: install
	$(BIN)/ruff check chaos harness tests benchmarks
	$(BIN)/mypy
	$(BIN)/bandit -c pyproject.toml -q -r chaos harness

# The installed dependencies (the pins and what the ranges resolved to) against PyPI's
# vulnerability data (pip-audit). A known vulnerability fails it unless .ci/audit.py ignores
# it with a reason; an unreachable service is said loudly and does not (docs/security.md).
audit: install
	$(BIN)/python .ci/audit.py

bench: bytecode
	$(BIN)/python benchmarks/harness_bench.py
	$(BIN)/python benchmarks/scale_bench.py
	$(BIN)/python benchmarks/sdc_bench.py
	$(BIN)/python benchmarks/net_bench.py
	$(BIN)/python benchmarks/storage_bench.py
	$(BIN)/python benchmarks/checker_bench.py

# The controller SIGKILLed at SIGKILL_TRIALS random moments of a real run, each followed by
# `trainchaos cleanup` and a count of what is left (benchmarks/sigkill_bench.py; figures in
# docs/testing.md). About 15 minutes: not part of `make test`. Its `cleanup` sweeps the
# machine, so run it alone.
SIGKILL_TRIALS ?= 50
bench-sigkill: bytecode
	$(BIN)/python benchmarks/sigkill_bench.py --trials $(SIGKILL_TRIALS)

# trainchaos's crash-point sweep side by side with ckpt-chaos 0.1.8, one target after the
# other (benchmarks/ckpt_chaos_compare.py; the figures in docs/checkers.md). Its hf_trainer
# target is a transformers Trainer under both tools: the `compare` extra, installed here only
# (make test does not need it), with the torch pin again so the resolver keeps it. Heavy
# (every crash point is a real job: tens of minutes): run it alone.
COMPARE_TARGETS ?= plain,loop_ddp_rename,loop_ddp,lightning_trainer,hf_trainer
bench-compare: bytecode
	$(BIN)/pip install -q --disable-pip-version-check --no-compile -e '.[dev,stacks,compare]' "$(TORCH_PIN)"
	$(BIN)/python benchmarks/ckpt_chaos_compare.py --targets $(COMPARE_TARGETS)

clean:
	rm -rf $(VENV) reports/smoke .pytest_cache
