# Sourced by the compat scripts: `ensure_tools` installs Java 17 and Maven when missing (as root,
# from Debian's packages). The sourcing script defines `log`.
ensure_tools() {
    if command -v java >/dev/null 2>&1 && command -v mvn >/dev/null 2>&1; then
        return
    fi
    if [ "$(id -u)" != 0 ]; then
        log "java and mvn are needed: apt-get install -y openjdk-17-jdk-headless maven"
        exit 1
    fi
    log "installing Java 17 and Maven"
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openjdk-17-jdk-headless maven
}
