# Nexbot developer entry points. `make test` is what CI runs (through .ci/run).
.PHONY: build test lint fmt image bench up

build:
	cargo build --workspace

test:
	cargo test --workspace --no-fail-fast

lint:
	cargo fmt --all -- --check
	cargo clippy --workspace --all-targets -- -D warnings

fmt:
	cargo fmt --all

image:
	@echo "make image: the subagent image is not built yet (issue: subagent program)" >&2; exit 2

bench:
	@echo "make bench: no benchmarks yet (they come with the subagent and pool)" >&2; exit 2

up:
	@echo "make up: the host daemon and compose.yaml are not built yet" >&2; exit 2
