# Entry points: `make demo`, `make test` (README.md). Both install the Debian packages they need.
SHELL := /bin/bash
DEBIAN_PACKAGES := pkg-config libvpx-dev libopus-dev libsrtp2-dev libssl-dev libyuv-dev libusrsctp-dev \
                   libwebrtc-audio-processing-dev libx11-dev libxext-dev libavformat-dev xvfb ffmpeg tshark python3-pip openssl \
                   chromium chromium-driver python3-selenium firefox-esr iproute2 nftables coturn \
                   redis-server janus time nodejs node-typescript espeak-ng gcc
# Interop peers from PyPI, used by the tests: aiortc, and LiveKit's official Python SDK (its core
# is Rust over Google's libwebrtc) with its server-side package for tokens.
PYPI_PACKAGES := aiortc livekit==1.2.0 livekit-api==1.2.2
# PESQ (ITU-T P.862) for the quality bench's audio scores: built from source (gcc), so apart.
PYPI_BUILT := pesq==0.0.4
FUZZ_TARGETS := y4m ivf wav ogg opus rtp rtcp vp8 stun sdp dtls ice srtp dcep signaling link resp livekit e2ee
FUZZ_SECONDS ?= 60
FUZZ_BUILD := .build-fuzz
FUZZ_FLAGS := -Xswiftc -sanitize=fuzzer,address -Xswiftc -DFUZZING -Xcc -fsanitize=fuzzer-no-link,address \
              -Xswiftc -Xclang-linker -Xswiftc -fuse-ld=lld

.PHONY: deps demo test fuzz fuzz-replay bench bench-quality build release clean protos

# Installs the system packages only when one is missing, so repeated runs stay fast.
deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:" $$missing; \
		export DEBIAN_FRONTEND=noninteractive; \
		apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
	@python3 -c 'import aiortc, livekit.rtc, livekit.api' 2>/dev/null || { echo "installing from PyPI: $(PYPI_PACKAGES)"; \
		python3 -m pip install --quiet --disable-pip-version-check $(PYPI_PACKAGES) 2>/dev/null \
		|| python3 -m pip install --quiet --disable-pip-version-check --break-system-packages $(PYPI_PACKAGES); }
	@python3 -c 'import pesq' 2>/dev/null || { echo "installing from PyPI: $(PYPI_BUILT)"; \
		python3 -m pip install --quiet --disable-pip-version-check $(PYPI_BUILT) 2>/dev/null \
		|| python3 -m pip install --quiet --disable-pip-version-check --break-system-packages $(PYPI_BUILT); }

# Release builds link the Swift runtime statically: the sharers' resident memory is ~3 MB smaller
# (docs/screen-share.md, "Memory"), and one set of flags for all of them keeps them from rebuilding.
RELEASE := -c release --static-swift-stdlib

build: deps release

RELEASE_PRODUCTS := rtc-server rtc-cli rtc-sharer rtc-capture
RELEASE_BUILD := for p in $(RELEASE_PRODUCTS); do swift build $(RELEASE) --product $$p || exit 1; done

release:
	@$(RELEASE_BUILD)

demo: build
	.build/release/rtc-cli demo --out out/demo

# The tests' debug build first; then the tests run in two lanes side by side, straight from the
# test bundle (so that SwiftPM's lock on .build is free), each lane one test at a time:
# - lane A holds every suite with real-time figures (freezes, idle gaps, latency, loss and
#   bandwidth across namespaces, browsers' rates), which two cores shared with another such suite
#   could not keep;
# - lane B (LANE_B below) holds suites whose checks are about content, not time (the server's
#   API, the cluster's placement, recordings' files, media files, coturn's credentials, the
#   server's limits, the media processes, the web client's unit page), at nice 10, so lane A's
#   threads win whenever both want a core.
# Beside them the release binaries are built at SCHED_IDLE (chrt --idle, and ionice's idle class
# for the disk): the tests wait on real time most of the run and an idle-class build only gets
# the cycles they leave, the kernel preempting it the moment a test's thread wakes. The budget
# tests (BudgetTests) measure those release binaries as shipped, so they run last, once the build
# is done, with the few real-time tests (LAST) that its link still disturbed. The whole log goes to out/test.log (lane B's to out/test-b.log, appended to it at the
# end); a failed run ends by listing its failures again, so the last lines of a CI log name them.
# The build and lane B run in sessions of their own, ended with the recipe (Ctrl-C included: a
# shell's background job ignores SIGINT; and should the recipe be killed outright, their own
# watchers end them), and are not recursive makes, so `make -n test` only prints.
TEST_RUN := .build/debug/swift-rtcPackageTests.xctest --testing-library swift-testing --no-parallel
# Run last, with the budgets, once the release build is done: tests whose 300 ms figures a
# release link beside them (even in the idle class) pushed past their bound twice.
LAST := SpeakerTests
LANE_B := RoomServiceTests|ClusterTests|WebMRecordingTests|RecordingTests|MediaFileTests|TURNInteropTests|HardeningTests|MediaProcessesTests|WebClientTests
# The quality bench's smoke run (four processes of its own for ~30 s) runs after the release
# build, with the budgets, alone: in lane B, ahead of the recordings, it pushed them into lane A's
# busiest minutes (6 frames in 8 s at nice 10); at lane B's end it overlapped LiveKit's 3-layer
# simulcast test in lane A, which then saw no video.
SOLO := QualityBenchTests
test: deps
	@mkdir -p out
	swift build --build-tests
	@set -o pipefail; rm -f out/release.status out/lane-b.status; \
	setsid bash -c '( while kill -0 $$1 2>/dev/null; do sleep 1; done; kill -- -$$$$ ) & watcher=$$!; \
		ionice -c 3 chrt --idle 0 bash -c '"'"'$(RELEASE_BUILD)'"'"' > out/release.log 2>&1; echo $$? > out/release.status; \
		kill $$watcher' _ $$$$ & builder=$$!; \
	setsid bash -c '( while kill -0 $$1 2>/dev/null; do sleep 1; done; kill -- -$$$$ ) & watcher=$$!; \
		nice -n 10 $(TEST_RUN) --filter '"'"'$(LANE_B)'"'"' > out/test-b.log 2>&1; echo $$? > out/lane-b.status; \
		kill $$watcher' _ $$$$ & laneB=$$!; \
	trap 'kill -- -$$builder -$$laneB 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	$(TEST_RUN) --skip 'BudgetTests|$(LAST)|$(SOLO)|$(LANE_B)' 2>&1 | tee out/test.log; status=$$?; \
	wait $$laneB; echo "== lane B (out/test-b.log)" | tee -a out/test.log; cat out/test-b.log >> out/test.log; tail -3 out/test-b.log; \
	[ "$$(cat out/lane-b.status 2>/dev/null)" = 0 ] || status=1; \
	wait $$builder; trap - EXIT; \
	if [ "$$(cat out/release.status 2>/dev/null)" = 0 ]; then \
		$(TEST_RUN) --filter 'BudgetTests|$(LAST)|$(SOLO)' 2>&1 | tee -a out/test.log || status=1; \
	else echo "== the release build failed (out/release.log):"; tail -40 out/release.log; status=1; fi; \
	if [ $$status -ne 0 ]; then echo "== failures (whole log: out/test.log)"; \
		grep -E '✘|: error: |Fatal error|Test Case .* failed' out/test.log | tail -60; fi; exit $$status

# Builds the libFuzzer executable (every target in one) and runs each target for FUZZ_SECONDS on a copy of its committed corpus.
# New inputs land in out/fuzz/NAME; a crash leaves crash-* there: copy it into Fuzz/Corpus/NAME.
fuzz: deps
	swift build --build-path $(FUZZ_BUILD) $(FUZZ_FLAGS) --product rtc-fuzz
	@for t in $(FUZZ_TARGETS); do \
		mkdir -p out/fuzz/$$t && cp -n Fuzz/Corpus/$$t/* out/fuzz/$$t/ ; \
		echo "== rtc-fuzz $$t for $(FUZZ_SECONDS) s"; \
		(cd out/fuzz && ../../$(FUZZ_BUILD)/debug/rtc-fuzz $$t $$t -max_total_time=$(FUZZ_SECONDS) \
			-rss_limit_mb=4096 -max_len=65536 -print_final_stats=1 2>&1 | grep -E "stat::number_of_executed_units|stat::peak_rss|ERROR|SUMMARY|Done") || exit 1; \
	done

# Replays the corpora without libFuzzer (the test suite does the same through FuzzHarness).
fuzz-replay:
	swift build -q --product rtc-fuzz
	@for t in $(FUZZ_TARGETS); do .build/debug/rtc-fuzz $$t Fuzz/Corpus/$$t || exit 1; done

bench: build
	.build/release/rtc-cli bench encode

# Audio quality against libwebrtc (LiveKit's Python SDK) on one lossy path, four pairs (docs/quality.md).
bench-quality: deps build
	Benchmarks/quality.sh .build/release/rtc-cli out/quality

clean:
	rm -rf .build $(FUZZ_BUILD) out

# Regenerates Sources/LiveKitProtocol/Generated from Protos/livekit (commit the result: building the
# package never needs protoc). protoc from Debian's protobuf-compiler; protoc-gen-swift built from
# the swift-protobuf the package resolves.
protos:
	@command -v protoc >/dev/null || { export DEBIAN_FRONTEND=noninteractive; apt-get update -qq && apt-get install -y -qq protobuf-compiler >/dev/null; }
	swift build -c release --product protoc-gen-swift
	protoc --plugin=protoc-gen-swift=.build/release/protoc-gen-swift --swift_opt=Visibility=Public \
		--swift_out=Sources/LiveKitProtocol/Generated -I Protos/livekit Protos/livekit/*.proto
