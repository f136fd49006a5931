# Nexbot developer entry points. `make test` is what CI runs (through .ci/run).
.PHONY: build test lint fmt image bench up

build:
	cargo build --workspace

# The Docker tests run the subagent image, so it is built first.
test: image
	cargo test --workspace --no-fail-fast

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

# The subagent image, built offline: a static binary and Debian's busybox-static, staged into
# a context under target/ and built FROM scratch (nothing is pulled).
IMAGE ?= nexbot-subagent:dev
IMAGE_TRIPLE := x86_64-unknown-linux-gnu
IMAGE_CTX := target/subagent-image
BUSYBOX ?= /bin/busybox

image:
	RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --target $(IMAGE_TRIPLE) -p nexbot-subagent
	@file -L $(BUSYBOX) 2>/dev/null | grep -q 'statically linked' || ldd $(BUSYBOX) 2>&1 | grep -q 'not a dynamic' || \
	  { echo "make image: $(BUSYBOX) is not a static busybox; apt-get install busybox-static" >&2; exit 2; }
	rm -rf $(IMAGE_CTX)
	mkdir -p $(IMAGE_CTX)/rootfs/bin $(IMAGE_CTX)/rootfs/etc $(IMAGE_CTX)/rootfs/tmp \
	  $(IMAGE_CTX)/workspace/scratch $(IMAGE_CTX)/workspace/skills
	chmod 1777 $(IMAGE_CTX)/rootfs/tmp
	cp target/$(IMAGE_TRIPLE)/release/nexbot-subagent $(IMAGE_CTX)/rootfs/bin/nexbot-subagent
	cp $(BUSYBOX) $(IMAGE_CTX)/rootfs/bin/busybox
	for applet in $$($(BUSYBOX) --list); do \
	  [ -e $(IMAGE_CTX)/rootfs/bin/$$applet ] || ln -s busybox $(IMAGE_CTX)/rootfs/bin/$$applet; done
	printf 'root:x:0:0:root:/:/bin/sh\nnexbot:x:65532:65532:nexbot:/workspace/scratch:/bin/sh\n' > $(IMAGE_CTX)/rootfs/etc/passwd
	printf 'root:x:0:\nnexbot:x:65532:\n' > $(IMAGE_CTX)/rootfs/etc/group
	DOCKER_BUILDKIT=1 /usr/bin/docker build -q -f docker/subagent.Dockerfile -t $(IMAGE) $(IMAGE_CTX)
	@/usr/bin/docker image inspect $(IMAGE) --format '{{.Size}}' | \
	  awk '{ printf "$(IMAGE): %.1f MB (%d bytes)\n", $$1/1000000, $$1 }'

# Every promised figure, measured in one run and ended by ONE summary table (figure |
# measured | target | met?). Each bench appends its headline figures to BENCH_FIGURES; the
# `summary` bench prints them. The benches are built first (one package at a time, as they
# run, so features resolve the same) to keep compilation out of the measured run. Nothing
# asserts a speed: a missed target prints NO.
BENCH_FIGURES := $(CURDIR)/target/bench/figures.tsv
BENCH_RUNS := "-p nexbot-subagent --bench ping_rtt" "-p nexbot-tests --bench pool" \
  "-p nexbot-host --bench serve_idle" "-p nexbot-host --bench egress" "-p nexbot-tests --bench summary"

bench: image
	for b in $(BENCH_RUNS); do cargo bench --no-run $$b || exit 1; done
	@mkdir -p $(dir $(BENCH_FIGURES))
	@{ echo "# make bench started at $$(date +%s)"; \
	  echo "# load average at the start: $$(cut -d' ' -f1-3 /proc/loadavg)"; } > $(BENCH_FIGURES)
	@failed=; for b in $(BENCH_RUNS); do echo "== cargo bench $$b"; \
	  NEXBOT_BENCH_FIGURES=$(BENCH_FIGURES) cargo bench -q $$b || failed="$$failed [$$b]"; done; \
	  if [ -n "$$failed" ]; then echo "make bench: failed:$$failed" >&2; exit 1; fi

up:
	@echo "make up: the host daemon and compose.yaml are not built yet" >&2; exit 2
