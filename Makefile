# The course's commands. `make grade EX=01` and `make test` work on a fresh clone: where torch,
# triton, numpy and pytest are not importable, the first run builds .venv with the pinned
# versions of requirements.txt (nbgrader included).

EX ?=
TARGET ?= exercises
SEED ?=
JSON ?=
COURSE ?= build/course

# Use the Python that already has the course's packages (a GPU box, the container); else .venv.
# nbgrader is only needed by release/autograde and their test, which say so when it is missing.
HAVE_PACKAGES := $(shell python3 -c "import torch, triton, numpy, pytest" >/dev/null 2>&1 && echo yes)
ifeq ($(HAVE_PACKAGES),yes)
PYTHON := python3
SETUP :=
else
PYTHON := .venv/bin/python
SETUP := .venv/.installed
endif

.PHONY: grade test skeletons doctor bench release autograde clean help

help:
	@echo "make grade EX=01 [TARGET=solutions|<dir>] [SEED=n] [JSON=results.json]   grade exercises"
	@echo "make test          the project's own tests (CPU, Triton interpreter)"
	@echo "make doctor        report the environment and known-broken version pairs"
	@echo "make bench [TARGET=solutions]   time exercises 04-07 against torch SDPA (GPU only)"
	@echo "make skeletons     regenerate exercises/*/*.py from solutions/"
	@echo "make release       build the nbgrader course in $(COURSE) and generate the student notebooks"
	@echo "make autograde     autograde $(COURSE)/submitted, write grades.csv and feedback"

.venv/.installed: requirements.txt
	python3 -m venv .venv
	.venv/bin/pip install --quiet --upgrade pip
	.venv/bin/pip install --quiet -r requirements.txt
	.venv/bin/pip install --quiet --no-deps -e .
	touch $@

grade: $(SETUP)
	$(PYTHON) -m grader $(EX) --target $(TARGET) $(if $(SEED),--seed $(SEED)) $(if $(JSON),--json $(JSON))

test: $(SETUP)
	$(PYTHON) -m pytest tests $$($(PYTHON) -c "import xdist" 2>/dev/null && printf -- "-n 2")

bench: $(SETUP)
	$(PYTHON) -m common.benchmark --target $(TARGET)

skeletons: $(SETUP)
	$(PYTHON) -m grader.skeletons

doctor: $(SETUP)
	$(PYTHON) -m grader.doctor

release: $(SETUP)
	$(PYTHON) -m grader.nbgrader release --course $(COURSE)

autograde: $(SETUP)
	$(PYTHON) -m grader.nbgrader autograde --course $(COURSE)

clean:
	rm -rf build .pytest_cache
