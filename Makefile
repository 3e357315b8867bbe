# bcd-ansible. Two commands do everything on a fresh machine:
#   make demo   set up, start the local sandbox, adopt it with adopt-cluster.yml, print the report
#   make test   set up, lint, and run every test (starts and stops its own sandbox)
# (make ee builds the execution environment image localhost/bcd-ee:<version> with podman;
# its run as AWX runs it is in make test-long: docs/execution-environment.md)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections

.PHONY: setup build docs ee-context ee lint test test-unit test-sandbox test-molecule test-kind test-matrix test-long demo \
        sandbox sandbox-down sandbox-status sandbox-build bench clean kind kind-down kind-status pyroot \
        test-long-matrix test-kube test-long-kube

# The checkout is the collection bcd.kubernetes: it is linked into ./collections, where
# ansible.cfg (collections_path) and the tests (tests/conftest.py) find it by that name.
COLL_LINK := collections/ansible_collections/bcd/kubernetes

setup: $(STAMP) $(COLL_LINK)

$(COLL_LINK):
	mkdir -p $(dir $(COLL_LINK))
	ln -sfn ../../.. $(COLL_LINK)

$(STAMP): requirements.txt requirements-dev.txt sandbox/pyproject.toml requirements.yml scripts/install_collections.py
	@command -v $(PYTHON) >/dev/null || { echo "setup: $(PYTHON) not found (bcd-ansible needs Python 3.11 to 3.13)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements-dev.txt
	$(BIN)/python scripts/install_collections.py --dest collections
	@$(BIN)/python -c 'import platform; from ansible.release import __version__ as v; print(f"setup: ansible-core {v} on Python {platform.python_version()}")'
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ansible-lint --profile production
	$(BIN)/antsibull-changelog lint
	$(BIN)/antsibull-docs lint-collection-docs --plugin-docs .
	scripts/sanity.sh

# Every pytest run takes its tests in an order the commit picks (pytest-randomly: files, then the
# tests in each file, shuffled by TEST_SEED), so no test can lean on another having run first.
# The first line of a run and a failed run's last line give the seed: TEST_SEED=<n> repeats it.
TEST_SEED ?= $(shell printf '%d' 0x$$(git rev-parse --short=7 HEAD 2>/dev/null || echo 0))
ORDER := -p randomly --randomly-seed=$(TEST_SEED)

test-unit: setup
	$(BIN)/pytest $(ORDER) -m "not sandbox and not long" --durations=15

# The sandbox tests mostly wait on the cluster's own timers, so they run in SANDBOX_WORKERS
# pytest-xdist workers, a sandbox each (tests/sandbox_fixtures.py), a test file per worker at a
# time (its module fixtures set the cluster up for its tests). The binaries are built first, once,
# so a cold cache is not built by two workers at the same time. The compatibility scenario
# (marked compat, and sandbox since it needs one) has its own sandbox and controller: test-matrix.
SANDBOX_WORKERS ?= 2
test-sandbox: setup
	$(BIN)/python -m sandbox build
	$(BIN)/pytest $(ORDER) -m "sandbox and not long and not compat" -n $(SANDBOX_WORKERS) --dist loadfile --durations=30

# molecule scenarios against their own sandboxes (.sandbox-molecule-<scenario>). Each one's output
# also goes to out/molecule-<scenario>.log; on a failure the failed tasks are printed again last,
# where a CI log's tail shows them.
MOLECULE_SCENARIOS := default rollout
test-molecule: setup
	@mkdir -p out
	@for s in $(MOLECULE_SCENARIOS); do \
	  $(BIN)/molecule test -s $$s 2>&1 | tee out/molecule-$$s.log; rc=$${PIPESTATUS[0]}; \
	  if [ $$rc -ne 0 ]; then \
	    echo "molecule scenario $$s FAILED (rc $$rc); its failed tasks (out/molecule-$$s.log):"; \
	    sed 's/\x1b\[[0-9;]*m//g' out/molecule-$$s.log | grep -B 2 -A 40 -E 'fatal: \[|failed: \[' | tail -150; \
	    exit $$rc; \
	  fi; \
	done

# molecule scenario `kind` (real kubelets, the stand-in bcd image) when the kind cache is warm: a
# cold build takes up to 13 minutes on 2 cores (sandbox/kind/README.md), more than make test can
# spare (make kind builds it; .ci/run builds it after make test when time is left). It says plainly
# when it skips, and why; the line also goes to out/kind-scenario.txt, which .ci/run prints.
KIND_NOTE := out/kind-scenario.txt
test-kind: setup
	@mkdir -p out
	@if reason=$$($(BIN)/python -m sandbox kind check); then \
	  start=$$(date +%s); \
	  if $(BIN)/molecule test -s kind; then \
	    echo "molecule scenario kind: passed in $$(( $$(date +%s) - start ))s" | tee $(KIND_NOTE); \
	  else \
	    echo "molecule scenario kind: FAILED after $$(( $$(date +%s) - start ))s" | tee $(KIND_NOTE); exit 1; \
	  fi; \
	else \
	  echo "make test: SKIPPED molecule scenario kind: $$reason" | tee $(KIND_NOTE); \
	fi

# The ansible-core matrix (sandbox/pyroot.py: a Debian trixie root, Python 3.13, a venv per
# supported ansible-core line) when the root is built: the private-API shape tests on every line,
# then the compatibility scenario (tests/compat) on MATRIX_CORE. A cold root takes about 3 minutes
# and PyPI, and a machine that cannot build one (not root, Debian's mirror or PyPI unreachable)
# must not fail make test for it: it says plainly when it skips, and why; the line also goes to
# out/matrix.txt, which .ci/run prints (and .ci/run builds the root when time is left). Once the
# root is built, a failure on any line fails make test.
MATRIX_NOTE := out/matrix.txt
MATRIX_CORE ?= 2.21
MATRIX_SHAPE_CORES ?= 2.19 2.20 2.21 2.22
MATRIX_SHAPE_TESTS ?= tests/unit/plugins/test_compat.py tests/unit/plugins/test_inprocess.py
# the scenario runs on the host and runs each playbook inside the root itself
# (`python -m sandbox pyroot run --core $$BCD_MATRIX_CORE -- ansible-playbook ...`)
MATRIX_SCENARIO ?= $(BIN)/pytest $(ORDER) -m compat --durations=15
test-matrix: setup
	@mkdir -p out
	@if reason=$$($(BIN)/python -m sandbox pyroot check); then \
	  start=$$(date +%s); \
	  for core in $(MATRIX_SHAPE_CORES); do \
	    echo "matrix: the private-API shape tests on ansible-core $$core (Python 3.13)"; \
	    if ! $(BIN)/python -m sandbox pyroot run --core $$core -- python -m pytest $(ORDER) -q $(MATRIX_SHAPE_TESTS); then \
	      echo "matrix: the shape tests FAILED on ansible-core $$core after $$(( $$(date +%s) - start ))s" | tee $(MATRIX_NOTE); \
	      exit 1; \
	    fi; \
	  done; \
	  if BCD_MATRIX_CORE=$(MATRIX_CORE) $(MATRIX_SCENARIO); then \
	    echo "matrix: shape tests on $(MATRIX_SHAPE_CORES) and the compatibility scenario on ansible-core $(MATRIX_CORE): passed in $$(( $$(date +%s) - start ))s" | tee $(MATRIX_NOTE); \
	  else \
	    echo "matrix: the compatibility scenario on ansible-core $(MATRIX_CORE) FAILED after $$(( $$(date +%s) - start ))s" | tee $(MATRIX_NOTE); \
	    exit 1; \
	  fi; \
	else \
	  echo "make test: SKIPPED the ansible-core matrix: $$reason" | tee $(MATRIX_NOTE); \
	fi

# The compatibility scenario (tests/compat, on this venv's ansible-core) on a second Kubernetes
# release: the rest of make test runs on the newest (the sandbox's default); this takes the one
# the commit picks in rotation among the older supported ones (sandbox/build.py), so successive
# commits cover them all. Run only when that release is built: a cold build takes about 10
# minutes on 2 cores, more than make test can spare; it says plainly when it skips, and why; the
# line also goes to out/kube.txt, which .ci/run prints (and .ci/run builds it when time is left).
# KUBE_OTHER=1.33 picks one by hand.
KUBE_NOTE := out/kube.txt
KUBE_SCENARIO ?= env BCD_MATRIX_CORE=host $(BIN)/pytest $(ORDER) -m compat --durations=15
test-kube: setup
	@mkdir -p out
	@other="$${KUBE_OTHER:-$$($(BIN)/python -m sandbox build --rotation "$$(git rev-parse HEAD 2>/dev/null)")}"; \
	if [ -z "$$other" ]; then \
	  echo "make test: SKIPPED the compatibility scenario on a second Kubernetes release: only one is supported" | tee $(KUBE_NOTE); \
	  exit 0; \
	fi; \
	rc=0; reason=$$($(BIN)/python -m sandbox build --check --kube-version "$$other" 2>&1) || rc=$$?; \
	if [ $$rc -eq 2 ]; then \
	  echo "make test: SKIPPED the compatibility scenario on Kubernetes $$other: $$reason" | tee $(KUBE_NOTE); \
	elif [ $$rc -ne 0 ]; then \
	  echo "kube: KUBE_OTHER=$$other: $$reason" | tee $(KUBE_NOTE); exit 1; \
	else \
	  start=$$(date +%s); \
	  if BCD_COMPAT_KUBE=$$other $(KUBE_SCENARIO); then \
	    echo "kube: the compatibility scenario on Kubernetes $$other: passed in $$(( $$(date +%s) - start ))s" | tee $(KUBE_NOTE); \
	  else \
	    echo "kube: the compatibility scenario on Kubernetes $$other FAILED after $$(( $$(date +%s) - start ))s" | tee $(KUBE_NOTE); \
	    exit 1; \
	  fi; \
	fi

test: lint docs test-unit test-sandbox test-molecule test-kind test-matrix test-kube

# make test-long: first its part of the ansible-core matrix (test-long-matrix), then the long
# tests, in the order TEST_SEED picks, as make test's (each long scenario starts from the
# sandbox's baseline, so none may lean on the one before, and a failure names the seed; under
# CI's deadline the tests the shuffle puts last are skipped: tests/reliability/plugin.py).
# Both run; either failing fails it.
# The matrix part runs on the trixie root when it is built (else skipped, saying why):
# ansible-test sanity (scripts/sanity.sh with the venv's ansible-core; each
# line reads its tests/sanity/ignore-X.Y.txt) and the collection's unit tests (tests/unit/plugins:
# the rest of the unit tests check this repository's tooling, which runs on the host only) on each
# of MATRIX_LONG_CORES, then the compatibility scenario on each of MATRIX_LONG_SCENARIO_CORES.
MATRIX_LONG_CORES ?= 2.20 2.21 2.22
MATRIX_LONG_SCENARIO_CORES ?= 2.20 2.22
MATRIX_LONG_UNIT_TESTS ?= tests/unit/plugins
test-long: setup
	@rc=0; $(MAKE) --no-print-directory test-long-matrix || rc=1; \
	$(MAKE) --no-print-directory test-long-kube || rc=1; \
	$(BIN)/pytest $(ORDER) -m long || rc=1; \
	exit $$rc

# make test-long's part of the matrix runs first: it takes a known time (about 15 minutes on 2 cores
# with ansible-test's venvs cold), and under CI's deadline the long tests after it use what is left.
test-long-matrix: setup
	@start=$$(date +%s); if reason=$$($(BIN)/python -m sandbox pyroot check); then \
	  for core in $(MATRIX_LONG_CORES); do \
	    venv=$$($(BIN)/python -m sandbox pyroot path --core $$core); \
	    echo "matrix: ansible-test sanity and the unit tests on ansible-core $$core (Python 3.13)"; \
	    $(BIN)/python -m sandbox pyroot run --core $$core -- env BIN=$$venv/bin scripts/sanity.sh || exit 1; \
	    $(BIN)/python -m sandbox pyroot run --core $$core -- python -m pytest $(ORDER) -q \
	      -m "not sandbox and not long" $(MATRIX_LONG_UNIT_TESTS) || exit 1; \
	  done; \
	  for core in $(MATRIX_LONG_SCENARIO_CORES); do \
	    BCD_MATRIX_CORE=$$core $(MATRIX_SCENARIO) || exit 1; \
	  done; \
	  echo "matrix: sanity and unit tests on $(MATRIX_LONG_CORES), the scenario on $(MATRIX_LONG_SCENARIO_CORES): passed in $$(( $$(date +%s) - start ))s"; \
	else \
	  echo "make test-long: SKIPPED the ansible-core matrix: $$reason"; \
	fi

# make test-long's part of the Kubernetes matrix: the compatibility scenario on every supported
# release that is built (each cold one skipped, saying why; python -m sandbox build --kube-version
# all builds them, about 10 minutes each on 2 cores). The kind scenario (make test) runs the newest.
test-long-kube: setup
	@start=$$(date +%s); rc=0; ran=""; \
	for v in $$($(BIN)/python -m sandbox build --list); do \
	  if reason=$$($(BIN)/python -m sandbox build --check --kube-version $$v 2>&1); then \
	    BCD_COMPAT_KUBE=$$v $(KUBE_SCENARIO) || { echo "kube: the compatibility scenario on Kubernetes $$v FAILED"; rc=1; }; \
	    ran="$$ran $$v"; \
	  else \
	    echo "make test-long: SKIPPED the compatibility scenario on Kubernetes $$v: $$reason"; \
	  fi; \
	done; \
	echo "kube: the compatibility scenario on Kubernetes$${ran:- (none built)}: $$([ $$rc = 0 ] && echo passed || echo FAILED) in $$(( $$(date +%s) - start ))s"; \
	exit $$rc

# the documentation site, into out/docs (scripts/build_site.py): antsibull-docs' pages of the modules,
# roles and changelog, a page per playbook, the guides (README, docs/*.md, sandbox/README.md), rendered by Sphinx.
# tests/docs/test_site.py opens it in headless Chromium.
docs: setup
	$(BIN)/python scripts/build_site.py

# the collection tarball, as `ansible-galaxy collection install` takes it
build: setup
	mkdir -p out
	$(BIN)/ansible-galaxy collection build --force --output-path out .

# the execution environment's build context (execution-environment.yml), for podman/docker build
ee-context: setup
	$(BIN)/python scripts/build_ee.py --context-only

# the execution environment image localhost/bcd-ee:<version>, built with podman from that context
# on a Debian base made with mmdebstrap, no registry needed (docs/execution-environment.md)
ee: setup
	$(BIN)/python scripts/build_ee.py

sandbox-build: setup
	$(BIN)/python -m sandbox build

sandbox: setup
	$(BIN)/python -m sandbox up

sandbox-down: setup
	$(BIN)/python -m sandbox down

sandbox-status: setup
	$(BIN)/python -m sandbox status

# The kind test bed: real kubelets under podman, built from local parts (sandbox/README.md).
kind: setup
	$(BIN)/python -m sandbox kind up

kind-down: setup
	$(BIN)/python -m sandbox kind down

kind-status: setup
	$(BIN)/python -m sandbox kind status

# The Debian trixie root with a venv per ansible-core line (sandbox/README.md); about 3 minutes cold.
pyroot: setup
	$(BIN)/python -m sandbox pyroot build

demo: sandbox
	$(BIN)/ansible-playbook adopt-cluster.yml
	@echo "demo: the sandbox keeps running for more playbooks (README: Other targets); make sandbox-down stops it"

bench: setup
	$(BIN)/python -m bench

clean: sandbox-down
	rm -rf $(VENV) collections .pytest_cache .ruff_cache out context
