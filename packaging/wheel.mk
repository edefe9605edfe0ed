# wheel.mk: `make wheel` builds dist/gemmshim-<version>-py3-none-manylinux_*.whl
# (packaging/make_wheel.py) from the plain build's launcher and library;
# wheel-test (a test step) checks it with auditwheel (from PyPI, in a venv
# under $(BUILD), made once), installs it into a fresh venv and runs the
# launcher's tests through the installed console script.
WHEEL_DIR  ?= dist
AUDIT_VENV := $(BUILD)/tools-venv
AUDITWHEEL := $(AUDIT_VENV)/bin/auditwheel

.PHONY: wheel wheel-test
wheel: $(LAUNCHER) $(SHIM_SO)
	@if [ -n "$(SAN)" ]; then echo "make wheel: from the plain build only (SAN=$(SAN) given)"; exit 1; fi
	rm -f $(WHEEL_DIR)/gemmshim-*.whl
	$(PYTHON) packaging/make_wheel.py --launcher $(LAUNCHER) --library $(SHIM_SO) --out $(WHEEL_DIR)

$(AUDITWHEEL):
	rm -rf $(AUDIT_VENV)
	$(PYTHON) -m venv $(AUDIT_VENV)
	$(AUDIT_VENV)/bin/pip install -q --disable-pip-version-check auditwheel==6.8.2

ifeq ($(SAN),)
TEST_STEPS += wheel-test
endif
wheel-test: wheel $(AUDITWHEEL) $(INTEG_BIN) $(FP8_CLIENT) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
	GSTEST_WHEEL_DIR=$(WHEEL_DIR) GSTEST_AUDITWHEEL=$(AUDITWHEEL) \
	  $(INTEG_ENV) $(PYTHON) -m pytest -q tests/packaging/test_wheel.py
