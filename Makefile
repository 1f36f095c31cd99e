# The course's commands. `make grade EX=01` and `make test` work on a fresh clone: where torch,
# triton, numpy and pytest are not importable, the first run builds .venv with the versions pinned
# in pyproject.toml (its dependency groups; nbgrader included).

EX ?=
CHECK ?=
TARGET ?= exercises
SEED ?=
JSON ?=
COURSE ?= build/course
FORCE ?=
OUT ?=
# The interpreter that builds the virtual environment (Python >= 3.11), and where it goes.
PYTHON3 ?= python3
VENV ?= .venv
# A CPU-only torch from PyTorch's own index (0.75 GB installed, instead of PyPI's CUDA build: 1.1 GB
# and 2.7 GB of CUDA libraries), where that index answers and this machine has no NVIDIA GPU.
# TORCH_INDEX= always uses PyPI.
TORCH_INDEX ?= $(if $(shell command -v nvidia-smi 2>/dev/null),,https://download.pytorch.org/whl/cpu)

# Use the Python that already has the course's packages (a GPU box, the container); else .venv.
# nbgrader is only needed by release/autograde and their test, which say so when it is missing.
HAVE_PACKAGES := $(shell $(PYTHON3) -c "import torch, triton, numpy, pytest" >/dev/null 2>&1 && echo yes)
ifeq ($(HAVE_PACKAGES),yes)
PYTHON := $(PYTHON3)
SETUP :=
else
PYTHON := $(VENV)/bin/python
SETUP := $(VENV)/.installed
endif

.PHONY: grade test doctor bench skeletons release autograde student-pack gradescope clean help venv

help:
	@echo "For students:"
	@echo "  make grade EX=01 [CHECK=name] [TARGET=solutions|<dir>] [SEED=n] [JSON=results.json] [FRESH=1]   grade exercises"
	@echo "  make doctor        report the environment and known-broken version pairs"
	@echo "  make bench [TARGET=solutions] [SHAPES=B,H,d ...] [SIZES=512,1024,...] [GRAPHS=1] [AUTOGRAD_THREADS=0]"
	@echo "                     exercise 08's benchmark against naive PyTorch and SDPA: table, figures and CSV"
	@echo "                     in results/bench"
	@echo "                     (GPU; GRAPHS=1 replays CUDA graphs: the kernels without the host's launch cost;"
	@echo "                     AUTOGRAD_THREADS=0 runs each backward on the calling thread)"
	@echo "  make test          the project's own tests (CPU, Triton interpreter)"
	@echo "  (the first of these builds $(VENV) with the pinned packages of pyproject.toml)"
	@echo ""
	@echo "For instructors (these write files; none overwrites a student's or a grader's work):"
	@echo "  make skeletons [FORCE=1 | OUT=<dir>]   regenerate exercises/*/*.py from solutions/;"
	@echo "                     refuses to overwrite an edited skeleton unless FORCE=1, OUT=<dir> writes elsewhere"
	@echo "  make release       build or update the nbgrader course in $(COURSE) (keeps its gradebook and submissions)"
	@echo "  make autograde     autograde $(COURSE)/submitted, write grades.csv and feedback"
	@echo "  make student-pack  build/student-pack.tar.gz: the course for students, without solutions or tests"
	@echo "  make gradescope [EX=...]   build/gradescope/autograder.zip, grading with the instructor's seed"
	@echo "  make clean         delete build/, except course directories holding submissions or a gradebook"

venv: $(VENV)/.installed

# Dependencies first, with pip's progress; then the course package itself (editable), whose
# setuptools banner goes to a log.
$(VENV)/.installed: pyproject.toml
	@$(PYTHON3) -c "import sys; sys.exit(sys.version_info < (3, 11))" || { \
	  echo "error: the course needs Python >= 3.11; $(PYTHON3) is $$($(PYTHON3) --version 2>&1). Try: make $(MAKECMDGOALS) PYTHON3=python3.12"; exit 1; }
	@echo "First run: installing the course's pinned packages into $(VENV) (pyproject.toml, group 'all'):"
	@echo "  torch, triton, numpy, matplotlib, pytest, nbgrader with Jupyter. This takes a few minutes:"
	@echo "  about 2.1 GB on disk with a CPU-only torch, about 5.1 GB with PyPI's torch (CUDA build)."
	$(PYTHON3) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade "pip>=25.1"
	@index=""; \
	if [ -n "$(TORCH_INDEX)" ] && $(VENV)/bin/python -c "import urllib.request; urllib.request.urlopen('$(TORCH_INDEX)/', timeout=10)" >/dev/null 2>&1; then \
	  index="--extra-index-url $(TORCH_INDEX)"; echo "CPU-only torch from $(TORCH_INDEX)"; \
	elif [ -n "$(TORCH_INDEX)" ]; then \
	  echo "$(TORCH_INDEX) does not answer: pip takes torch from its usual indexes (from PyPI, the CUDA build)"; \
	fi; \
	echo "$(VENV)/bin/python -m pip install $$index --group all"; \
	$(VENV)/bin/python -m pip install $$index --group all
	@$(VENV)/bin/python -m pip install --no-deps -e . >$(VENV)/install-course.log 2>&1 || { cat $(VENV)/install-course.log; exit 1; }
	@echo "Installed: $$(du -sh $(VENV) | cut -f1) in $(VENV)."
	@touch $@

grade: $(SETUP)
	$(PYTHON) -m grader $(EX) --target $(TARGET) $(if $(CHECK),--check $(CHECK)) $(if $(SEED),--seed $(SEED)) $(if $(JSON),--json $(JSON)) $(if $(FRESH),--fresh)

test: $(SETUP)
	$(PYTHON) -m pytest tests $$($(PYTHON) -c "import xdist" 2>/dev/null && printf -- "-n 2")

student-pack: $(SETUP)
	$(PYTHON) -m grader.pack student

gradescope: $(SETUP)
	$(PYTHON) -m grader.pack gradescope $(EX)

bench: $(SETUP)
	$(PYTHON) -m grader.bench --target $(TARGET) $(foreach s,$(SHAPES),--shape $(s)) $(if $(SIZES),--sizes $(SIZES)) $(if $(GRAPHS),--graphs) $(if $(filter 0,$(AUTOGRAD_THREADS)),--no-autograd-threads)

doctor: $(SETUP)
	$(PYTHON) -m grader.doctor

skeletons: $(SETUP)
	$(PYTHON) -m grader.skeletons $(if $(FORCE),--force) $(if $(OUT),--out $(OUT))

release: $(SETUP)
	$(PYTHON) -m grader.nbgrader release --course $(COURSE)

autograde: $(SETUP)
	$(PYTHON) -m grader.nbgrader autograde --course $(COURSE)

# Standard library only: cleaning never builds .venv.
clean:
	$(PYTHON3) -m grader.clean
