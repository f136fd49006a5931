# The sandbox image: nothing but the static nexbot-subagent binary and a static busybox for
# /bin/sh. Built FROM scratch because no base image can be pulled (and none is needed).
# Build it with `make image`, which stages the context under target/subagent-image/.
#
# No CA bundle: reqwest uses rustls with the webpki built-in roots.
# Nothing in the image is writable by the subagent's user except through what the runtime
# mounts: the pool runs it read-only with tmpfs on /workspace/scratch and /tmp.
FROM scratch
COPY rootfs/ /
COPY --chown=65532:65532 workspace/ /workspace/
USER 65532:65532
ENV PATH=/bin \
    HOME=/workspace/scratch \
    TMPDIR=/tmp \
    NEXBOT_SCRATCH_DIR=/workspace/scratch \
    SKILLS_PATH=/workspace/skills
WORKDIR /workspace/scratch
ENTRYPOINT ["/bin/nexbot-subagent"]
