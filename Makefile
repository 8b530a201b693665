# bmas: the two set-up commands are `make run` and `make test`; both install what they need.
BUILD ?= build
ASAN_BUILD ?= build-asan
# The ASan pass builds and runs the unit tests (every parser's among them) and the security
# integration tests (tests/integration/CMakeLists.txt lists them first, labelled
# integration-security); the other integration tests run in `make test` only, against the plain
# build.
# Left out of it for now: two workspace shell tests whose shell's last output line did not reach
# the terminal in two fresh-clone ASan passes on 2 loaded cores (the exit code did). A likely
# cause, the agent's relay ending 100 ms after the exit code even with the shell's last bytes
# unread on LXD's socket, is fixed (src/lxd/interactive_exec.cc), but the failure has not been
# reproduced here, so the fix is unproven under ASan; `make test` runs both against the plain
# build.
# Left out of it as well: one security test whose time is spent waiting rather than in bmas's
# code, the hung agent's epilog test, which waits out the epilog's 30 s deadline; and the five
# longest simulations of the planner and the inference controller (pure policy code over
# simulated weeks, no parser and no trust boundary), which at -O0 under the sanitizers took
# minutes (the timetable floor's alone 97 s in a fresh-clone pass) against seconds in the plain
# build. `make test` runs all six.
ASAN_EXCLUDE ?= -E '^(WorkspaceShellTest\.AWorkspacesDevPtmxCannotLeadTheAgentOut|WorkspaceShellTest\.TheWorkingDirectoryAlwaysExists|AgentSecurityTest\.AHungAgentDoesNotHoldUpTheEpilog|ClusterSimTest\.AnOverloadedClusterMissesAndTheVerdictSaysWhere|ClusterSimTest\.TheSameSeedGivesTheSameReport|InferenceSimTest\.ReplicasFollowLoadAndYieldToTrainingWithoutLosingAStream|InferenceSimTest\.ATimetableFloorAtTheLabStartCutsTheRampsTtftBreaches|SlurmModelTest\.TheSameJobsGiveTheSameSchedule)$$'
# The ASan build is clang's (clang 14 compiles this code at -O0 in about 0.6 of g++'s time), not
# optimised, and carries line tables only: instrumented code at -O1 takes more than twice as long
# to compile, its tests mostly wait on daemons, and its reports still name file and line. It
# also carries libFuzzer's coverage hooks and builds the fuzz targets (BMAS_FUZZ), so that CI
# fuzzes with the binaries of the ASan pass rather than building everything a third time.
ASAN_CMAKE_FLAGS ?= -DCMAKE_CXX_COMPILER=clang++ -DBMAS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo '-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O0 -g1 -DNDEBUG'
FUZZ_BUILD ?= build-fuzz
# Seconds of fuzzing for all the targets together (scripts/fuzz.sh shares them out).
FUZZ_SECONDS ?= 300
CMAKE_FLAGS ?=
# ccache (when installed) keys objects by paths relative to the checkout, so a second clone on
# the same machine (CI's fresh clone, a worktree) reuses the objects of the first; the debug
# info of a reused object names the first clone's paths.
export CCACHE_SLOPPINESS = pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE = 5G
export CCACHE_BASEDIR = $(CURDIR)
export CCACHE_NOHASHDIR = 1

.PHONY: all deps build deb install run test unit asan asan-build asan-test fuzz fuzz-regression bench clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

# A Debian package of the build (bmas, its systemd units, an example /etc/bmas/bmas.toml):
# $(BUILD)/bmas_VERSION_ARCH.deb, to install on the controller and each node.
deb: build
	bash scripts/make-deb.sh $(BUILD)

# Puts bmas where every user finds it: $(PREFIX)/bin/bmas (as root: /usr/local/bin).
PREFIX ?= /usr/local
install: build
	install -D -m 0755 $(BUILD)/bmas $(DESTDIR)$(PREFIX)/bin/bmas

# Installs, builds, installs bmas and runs bmas up (Ctrl-C stops everything it started).
run: install
	$(DESTDIR)$(PREFIX)/bin/bmas up

# Installs, builds and runs every test; the output ends with ctest's summary.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 300

unit: build
	cd $(BUILD) && ctest --output-on-failure -L unit

# The unit and security tests, and every fuzz target over its seeds (ctest -L fuzz), against
# binaries built with AddressSanitizer and UndefinedBehaviorSanitizer (asan-build builds them;
# asan-test runs the tests against what is built).
asan: asan-build
	$(MAKE) --no-print-directory asan-test

asan-build: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DBMAS_SANITIZE=ON -DBMAS_BUILD_BENCH=OFF -DBMAS_INTEGRATION_TESTS=security $(ASAN_CMAKE_FLAGS) $(CMAKE_FLAGS)
	ninja -C $(ASAN_BUILD)

asan-test:
	cd $(ASAN_BUILD) && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure --timeout 300 $(ASAN_EXCLUDE)

# The libFuzzer targets in fuzz/, built with clang in $(FUZZ_BUILD): each fuzzes a copy of its
# seed corpus for FUZZ_SECONDS / (number of targets); fails on a crash and names its input.
fuzz: deps
	FUZZ_BUILD=$(FUZZ_BUILD) bash scripts/fuzz.sh --total $(FUZZ_SECONDS)

# Every fuzz target once over each of its committed seeds (seconds).
fuzz-regression: deps
	FUZZ_BUILD=$(FUZZ_BUILD) bash scripts/fuzz.sh --regression

# Runs the benchmarks and rewrites bench/RESULTS.md: the engine's, then the gateway's (which
# compare it with nginx and use wrk, installed by install-deps.sh --bench), then Slurm's and the
# workspaces', then the copy of a workspace between nodes, then the dashboard's pages against
# nginx serving the same bytes, then elastic inference and the dual path on a local Slurm (as
# root: they start their own local clusters and LXDs;
# otherwise they say why they skipped), then the capacity planner: its speed, and its model of
# Slurm against the real local one.
bench: deps $(BUILD)/build.ninja
	@bash scripts/install-deps.sh --bench
	cmake -B $(BUILD) -DBMAS_BUILD_BENCH=ON >/dev/null && ninja -C $(BUILD)
	python3 bench/run.py $(BUILD)
	python3 bench/gateway_bench.py $(BUILD)
	python3 bench/slurm_bench.py $(BUILD)
	python3 bench/dashboard_bench.py $(BUILD)
	python3 bench/lxd_bench.py $(BUILD)
	python3 bench/workspace_copy_bench.py $(BUILD)
	python3 bench/inference_bench.py $(BUILD)
	python3 bench/dual_path_bench.py $(BUILD)
	python3 bench/plan_speed_bench.py $(BUILD)
	python3 bench/plan_fidelity_bench.py $(BUILD)
	python3 bench/plan_inference_fidelity.py $(BUILD)

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
