# Sourced by the scripts: finds the Rust toolchain when PATH lacks it.
if ! command -v cargo >/dev/null 2>&1; then
  for d in "$HOME/.cargo/bin" /root/.cargo/bin /usr/local/cargo/bin; do
    if [ -x "$d/cargo" ]; then export PATH="$d:$PATH"; break; fi
  done
fi
