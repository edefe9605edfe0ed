# install.mk: `make install PREFIX=... [DESTDIR=...]` and `make uninstall`
# (the same PREFIX/DESTDIR), included by the top Makefile. What goes where:
# packaging/install.sh. install-test (a test step) installs into a
# temporary prefix, runs the launcher's tests over the installed copy and
# checks that uninstall leaves nothing behind.
PREFIX  ?= /usr/local
DESTDIR ?=

.PHONY: install uninstall install-test
install: $(LAUNCHER) $(SHIM_SO)
	packaging/install.sh install "$(DESTDIR)$(PREFIX)" $(LAUNCHER) $(SHIM_SO)

uninstall:
	packaging/install.sh uninstall "$(DESTDIR)$(PREFIX)"

ifeq ($(SAN),)
TEST_STEPS += install-test
endif
install-test: $(LAUNCHER) $(SHIM_SO) $(INTEG_BIN) $(FP8_CLIENT) $(STANDIN_LIBS_CU13) $(KERNELS_HOST_SO)
	$(INTEG_ENV) $(PYTHON) -m pytest -q tests/packaging/test_install.py
