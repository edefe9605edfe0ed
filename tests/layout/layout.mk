# The library's layering (docs/architecture.md): no cycle between its
# modules, the base layer and kernels/ below everything else, no source
# file over 1,000 lines. Read from the sources and the built objects.
TEST_STEPS += layout-check
.PHONY: layout-check
layout-check: $(SHIM_SO)
	$(PYTHON) tests/layout/check_layers.py $(BUILD)
