#!/usr/bin/env bash
# Following one request through servers that stay up (issue 8,
# "Precision"): curl -> nginx (reverse proxy, one worker) -> a Python
# upstream over TCP, none of them changed. With an ordinary tag the nginx
# worker keeps what one tagged request brought and passes it upstream with
# every later, untagged request. With a --per-request tag the worker and the
# upstream hold it while they serve that request and drop it when they
# answer. Run as root on Debian: bash examples/per-request.sh
source "$(dirname "$0")/lib.sh"
prepare
need nginx nginx-light
need curl curl
need python3 python3
kernel_lock

W=$(mktemp -d /tmp/mantle-per-request.XXXXXX); chmod 755 "$W"
UP=18081; FRONT=18080

# The upstream answers after 1.5 s, so that the script can look at who holds
# what while the request is being served.
cat > "$W/upstream.py" <<'PY'
import http.server, time
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        time.sleep(1.5)
        body = b"hello from upstream\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(__import__("sys").argv[1])), H).serve_forever()
PY
cat > "$W/nginx.conf" <<NG
worker_processes 1;
daemon off;
pid $W/nginx.pid;
error_log $W/error.log;
events { worker_connections 64; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$UP; keepalive 4; }
  server {
    listen 127.0.0.1:$FRONT;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; }
  }
}
NG

say "load mantle; start the upstream and nginx (untagged)"
mantle_up
bg python3 "$W/upstream.py" "$UP"
bg nginx -c "$W/nginx.conf" -p "$W"
for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$FRONT/" && break; sleep 0.05; done
NGINX=${_PIDS[1]}
WORKER=$(pgrep -P "$NGINX" | head -1)
UPSTREAM=${_PIDS[0]}
echo "nginx master $NGINX, worker $WORKER; upstream $UPSTREAM"

tags_of() { "$M" tag get --tid "$1" | sed 's/^[^:]*: *//'; }

# One tagged request, then one untagged; the holders while each is served
# and after.
follow() {
  local t=$1 c
  "$M" tag run "$t" -- curl -s -o /dev/null "http://127.0.0.1:$FRONT/" &
  c=$!
  sleep 0.7
  printf '  during the tagged request:   worker [%s]  upstream [%s]\n' "$(tags_of "$WORKER")" "$(tags_of "$UPSTREAM")"
  wait "$c"
  sleep 0.2
  printf '  after it was answered:       worker [%s]  upstream [%s]\n' "$(tags_of "$WORKER")" "$(tags_of "$UPSTREAM")"
  curl -s -o /dev/null "http://127.0.0.1:$FRONT/" &
  c=$!
  sleep 0.7
  printf '  during an untagged request:  worker [%s]  upstream [%s]\n' "$(tags_of "$WORKER")" "$(tags_of "$UPSTREAM")"
  wait "$c"
}

say "an ordinary tag (the paper's rule: a thread keeps what it received)"
tag_create sticky --lifeline 256
follow sticky
"$M" tag clear sticky --pid "$WORKER" >/dev/null 2>&1 || true
"$M" tag clear sticky --pid "$UPSTREAM" >/dev/null 2>&1 || true

say "a --per-request tag: held while serving the request that brought it"
tag_create req --per-request --lifeline 256
follow req

say "the per-request tag's lifeline (who received it, over what)"
"$M" tag lifeline req
