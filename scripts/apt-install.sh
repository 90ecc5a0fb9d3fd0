# Sourced by the service scripts: apt_install TOOL PACKAGE... installs
# Debian packages for TOOL with apt-get, logging to $STATE_DIR and failing
# through the caller's die() with a message naming TOOL and why. The caller
# defines STATE_DIR, log and die.
apt_install() {
  local tool=$1; shift
  command -v apt-get >/dev/null || die "$tool is missing and apt-get is not available to install it"
  [ "$(id -u)" = 0 ] || die "$tool is missing; installing it needs root (run: sudo apt-get install $*)"
  log "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get update -q >"$STATE_DIR/apt-update-$tool.log" 2>&1 ||
    die "apt-get update failed, see $STATE_DIR/apt-update-$tool.log"
  log "apt-get install $* (once)"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" \
    >"$STATE_DIR/apt-install-$tool.log" 2>&1 ||
    die "apt-get install $* failed, see $STATE_DIR/apt-install-$tool.log"
}
