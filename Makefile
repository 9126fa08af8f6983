# The two set-up commands (README, first section):
#   make run    install into .venv and start the broker on the embedded defaults
#   make test   install into .venv (with the test extras) and run the whole suite
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin
STAMP   = $(VENV)/.installed
NATIVE  = $(wildcard native/*.c native/*.h native/bench/*.c)
# nsqjs for the client-compatibility tests (tests/compat/js): pinned by package-lock.json
JS_DIR   = tests/compat/js
JS_STAMP = $(JS_DIR)/node_modules/.installed

.PHONY: run test test-fast bench example-config clean

$(STAMP): pyproject.toml setup.py $(NATIVE)
	@# the deploy tests verify the systemd unit with systemd-analyze (Debian package systemd)
	command -v systemd-analyze >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null; } || \
	    echo "warning: systemd-analyze missing (apt-get install systemd); the unit test will fail"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

$(JS_STAMP): $(JS_DIR)/package.json $(JS_DIR)/package-lock.json
	cd $(JS_DIR) && npm ci --no-audit --no-fund
	touch $@

run: $(STAMP)
	$(BIN)/nsqmp serve $(ARGS)

test: $(STAMP) $(JS_STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-fast: $(STAMP) $(JS_STAMP)
	$(BIN)/python -m pytest -m 'not slow' $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m nsqmp.bench.suite $(ARGS)

example-config: $(STAMP)
	$(BIN)/python -m nsqmp.config.example > deploy/nsqmp.toml.example

clean:
	rm -rf build *.egg-info nsqmp/_native*.so nsqmp/bench/_client*.so
