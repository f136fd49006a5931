#!/bin/sh
# After `make up`: builds the bundled MCP image when a configured MCP server runs it and the
# engine lacks it, then restarts those servers, so a newcomer who copied README's MCP example
# does not meet "No such image" (issue 48: `make up` did not build it, and the server stayed
# down until `make mcp-image` and a restart). Servers that run other images are left alone:
# they are the operator's to pull or build (health names them).
#
# Usage: docker/mcp-images.sh "CTL COMMAND" IMAGE "BUILD COMMAND"
#   CTL COMMAND    runs nexbot-ctl against the daemon (make up: compose exec -T host nexbot-ctl)
#   IMAGE          the bundled MCP image's name (make's MCP_IMAGE)
#   BUILD COMMAND  builds it (make up: make mcp-image)
set -eu

ctl=$1
image=$2
build=$3

# The servers whose image is IMAGE: `mcp ls --json` prints one field a line (serde's pretty
# print, two spaces a level, keys in any order): a server's fields six spaces in, its object
# closing at four (an instance's fields are deeper).
listed=$($ctl --json mcp ls) || {
  echo "make up: cannot list the MCP servers (nexbot-ctl mcp ls); the MCP image was not checked" >&2
  exit 0
}
servers=$(printf '%s\n' "$listed" |
  awk -F'"' -v image="$image" '
    /^      "name": / { name = $4 }
    /^      "image": / { img = $4 }
    /^    }/ { if (img == image && name != "") print name; name = ""; img = "" }')
[ -n "$servers" ] || exit 0
docker image inspect "$image" >/dev/null 2>&1 && exit 0

echo "make up: the MCP server(s) $(echo $servers) run $image, which the engine does not have: building it ($build)"
$build
for server in $servers; do
  $ctl mcp restart "$server" >/dev/null && echo "make up: MCP server $server restarted"
done
