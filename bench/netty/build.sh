#!/bin/sh
# Compiles bench/netty/HwtBench.java into bench/netty/build when it is missing
# or older than its source; exits 0 when the Netty peer can run, non-zero
# (with the reason on stderr) when it cannot. Used by bench/run.sh and
# bench/contract.sh, from the project root.
NETTY_JAR=${NETTY_JAR:-/usr/share/java/netty-common.jar}
command -v java >/dev/null 2>&1 || { echo "no java: netty will be missing" >&2; exit 1; }
[ -f "$NETTY_JAR" ] || { echo "no $NETTY_JAR: netty will be missing" >&2; exit 1; }
if [ ! -f bench/netty/build/HwtBench.class ] ||
   [ bench/netty/HwtBench.java -nt bench/netty/build/HwtBench.class ]; then
  if command -v javac >/dev/null 2>&1; then
    echo "compiling bench/netty/HwtBench.java" >&2
    mkdir -p bench/netty/build
    javac -d bench/netty/build -cp "$NETTY_JAR" bench/netty/HwtBench.java >&2 ||
      echo "javac failed: netty will be missing" >&2
  fi
fi
[ -f bench/netty/build/HwtBench.class ]
