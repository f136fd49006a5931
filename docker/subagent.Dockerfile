# The sandbox image: nothing but the nexbot-subagent binary (static in a release build; the test
# build's, `IMAGE_FROM=test`, comes with the shared libraries it needs) and a static busybox for
# /bin/sh. Built FROM scratch because no base image can be pulled (and none is needed).
# Build it with `make subagent-image`, which stages the tree under target/subagent-image/; the
# build context is the repository root, of which .dockerignore sends only the staged trees.
#
# No CA bundle: reqwest uses rustls with the webpki built-in roots.
# Nothing in the image is writable by the subagent's user except through what the runtime
# mounts: the pool runs it read-only with tmpfs on /workspace/scratch and /tmp.
# NEXBOT_SANDBOXED=1 lets the subagent scrub between tasks (kill every other process, empty
# scratch, /tmp, /dev/shm: subagent/src/scrub.rs); nowhere else does it.
FROM scratch
COPY target/subagent-image/rootfs/ /
COPY --chown=65532:65532 target/subagent-image/workspace/ /workspace/
USER 65532:65532
ENV PATH=/bin \
    HOME=/workspace/scratch \
    TMPDIR=/tmp \
    NEXBOT_SCRATCH_DIR=/workspace/scratch \
    SKILLS_PATH=/workspace/skills \
    NEXBOT_SANDBOXED=1
WORKDIR /workspace/scratch
ENTRYPOINT ["/bin/nexbot-subagent"]
