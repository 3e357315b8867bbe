# bcd-ansible. Two commands do everything on a fresh machine:
#   make demo   set up, start the local sandbox, adopt it with adopt-cluster.yml, print the report
#   make test   set up, lint, and run every test (starts and stops its own sandbox)
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.setup-stamp
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/collections

.PHONY: setup lint test test-unit test-sandbox test-molecule test-long demo sandbox sandbox-down \
        sandbox-status sandbox-build bench clean kind kind-down kind-status

setup: $(STAMP)

$(STAMP): requirements.txt requirements.yml scripts/install_collections.py
	@command -v $(PYTHON) >/dev/null || { echo "setup: $(PYTHON) not found (bcd-ansible needs Python 3.11)"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.txt
	$(BIN)/python scripts/install_collections.py --dest collections
	touch $(STAMP)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ansible-lint --profile production

test-unit: setup
	$(BIN)/pytest -m "not sandbox and not long" --durations=15

test-sandbox: setup
	$(BIN)/pytest -m "sandbox and not long" --durations=30

# molecule scenarios against their own sandboxes (.sandbox-molecule-<scenario>)
test-molecule: setup
	$(BIN)/molecule test -s default
	$(BIN)/molecule test -s rollout

test: lint test-unit test-sandbox test-molecule

test-long: setup
	$(BIN)/pytest -m long

sandbox-build: setup
	$(BIN)/python -m sandbox build

sandbox: setup
	$(BIN)/python -m sandbox up

sandbox-down: setup
	$(BIN)/python -m sandbox down

sandbox-status: setup
	$(BIN)/python -m sandbox status

# The kind test bed: real kubelets under podman, built from local parts (README: make kind).
kind: setup
	$(BIN)/python -m sandbox kind up

kind-down: setup
	$(BIN)/python -m sandbox kind down

kind-status: setup
	$(BIN)/python -m sandbox kind status

demo: sandbox
	$(BIN)/ansible-playbook adopt-cluster.yml

bench: setup
	$(BIN)/python -m bench

clean: sandbox-down
	rm -rf $(VENV) collections .pytest_cache .ruff_cache
