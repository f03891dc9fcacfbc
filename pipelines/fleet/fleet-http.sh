# Sourced by the fleet scripts: HTTP GETs with curl, or with python3 where there is no curl (the GPU machines).
#   http_status URL   the HTTP status, 000 when nothing answered
#   http_body URL     the body (of any status), nothing when nothing answered
# Certificates are not checked (self-signed test servers); each request gives up after 3 s.
if command -v curl > /dev/null 2>&1; then
  http_status () { curl -sk -o /dev/null -w '%{http_code}' --max-time 3 "$1" 2> /dev/null || true; }
  http_body () { curl -sk --max-time 3 "$1" 2> /dev/null || true; }
else
  ppx_http_py='import ssl, sys, urllib.request, urllib.error
ctx = ssl._create_unverified_context()
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=3, context=ctx); code, body = r.status, r.read()
except urllib.error.HTTPError as e:
    code, body = e.code, e.read()
except Exception:
    code, body = 0, b""
sys.stdout.write("%03d" % code if sys.argv[2] == "status" else body.decode("utf-8", "replace"))'
  http_status () { python3 -c "$ppx_http_py" "$1" status 2> /dev/null || echo 000; }
  http_body () { python3 -c "$ppx_http_py" "$1" body 2> /dev/null || true; }
fi
