//! OTLP/HTTP: one POST of a protobuf body, HTTP/1.1 over `std::net`, every
//! step (resolving aside, which uses the system's resolver) under one
//! deadline. Plain `http://` only: the usual deployment sends to a
//! collector on the same machine, which forwards over TLS where needed
//! (docs/otel.md). One connection per request (`Connection: close`): an
//! exporter sends a batch every few seconds, not a stream.
//!
//! The URL is the collector's base, as `OTEL_EXPORTER_OTLP_ENDPOINT` is:
//! `/v1/traces` and `/v1/metrics` are appended to its path.

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// Where to send: a parsed `http://host[:port][/prefix]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    /// The path prefix, without a trailing `/` ("" for none).
    pub prefix: String,
    /// The URL as given (for messages).
    pub url: String,
}

impl Endpoint {
    /// Parses a collector's base URL.
    pub fn parse(url: &str) -> Result<Endpoint, crate::Error> {
        let bad = |why: &str| crate::Error::Url {
            url: url.to_string(),
            why: why.to_string(),
        };
        let rest = if let Some(r) = url.strip_prefix("http://") {
            r
        } else if url.starts_with("https://") {
            return Err(bad(
                "https is not supported: send to a collector on this machine over http (docs/otel.md)",
            ));
        } else {
            return Err(bad(
                "expected http://HOST[:PORT][/PATH], e.g. http://127.0.0.1:4318",
            ));
        };
        let (auth, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if auth.contains('@') {
            return Err(bad("credentials in the URL are not supported"));
        }
        let (host, port) = if let Some(h) = auth.strip_prefix('[') {
            // [v6]:port
            let end = h.find(']').ok_or_else(|| bad("unclosed [ in the host"))?;
            let port = &h[end + 1..];
            (h[..end].to_string(), port.strip_prefix(':').unwrap_or(""))
        } else {
            match auth.rsplit_once(':') {
                Some((h, p)) => (h.to_string(), p),
                None => (auth.to_string(), ""),
            }
        };
        if host.is_empty() {
            return Err(bad("no host"));
        }
        let port = if port.is_empty() {
            if auth.ends_with(':') {
                return Err(bad("empty port"));
            }
            80
        } else {
            port.parse::<u16>()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| bad("the port is not a number from 1 to 65535"))?
        };
        if path.contains(['?', '#', ' ']) || path.chars().any(|c| c.is_control()) {
            return Err(bad(
                "the path may not hold a query, a fragment, spaces or control characters",
            ));
        }
        Ok(Endpoint {
            host,
            port,
            prefix: path.trim_end_matches('/').to_string(),
            url: url.to_string(),
        })
    }

    /// The URL of a signal (`/v1/traces`, `/v1/metrics`), for messages.
    pub fn url_of(&self, signal: &str) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        format!("http://{host}:{}{}{signal}", self.port, self.prefix)
    }
}

/// Why a POST did not succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fail {
    /// No connection (refused, unreachable, no address): worth retrying.
    Connect(String),
    /// The deadline passed: worth retrying.
    Timeout(String),
    /// The connection broke or the answer was not HTTP: worth retrying.
    Io(String),
    /// The collector answered with an error status.
    Status(u16, String),
}

impl Fail {
    /// Whether the same request may succeed later (OTLP/HTTP: 429, 502,
    /// 503, 504 and no answer are retryable; other errors are final).
    pub fn retryable(&self) -> bool {
        match self {
            Fail::Status(s, _) => matches!(s, 429 | 502 | 503 | 504),
            _ => true,
        }
    }
}

impl std::fmt::Display for Fail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Fail::Connect(m) => write!(f, "cannot connect: {m}"),
            Fail::Timeout(m) => write!(f, "no answer within the timeout ({m})"),
            Fail::Io(m) => write!(f, "{m}"),
            Fail::Status(s, m) if m.is_empty() => write!(f, "HTTP status {s}"),
            Fail::Status(s, m) => write!(f, "HTTP status {s}: {m}"),
        }
    }
}

/// POSTs `body` (protobuf) to the endpoint's `signal` path within
/// `timeout`; the answer's body on a 2xx status.
pub fn post(ep: &Endpoint, signal: &str, body: &[u8], timeout: Duration) -> Result<Vec<u8>, Fail> {
    let deadline = Instant::now() + timeout;
    let left = || {
        deadline
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| Fail::Timeout(ep.url_of(signal)))
    };
    let addrs: Vec<_> = (ep.host.as_str(), ep.port)
        .to_socket_addrs()
        .map_err(|e| Fail::Connect(format!("{}: {e}", ep.host)))?
        .collect();
    let mut last = Fail::Connect(format!("{}: no address", ep.host));
    let mut stream = None;
    for a in addrs {
        match TcpStream::connect_timeout(&a, left()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                last = Fail::Timeout(format!("connecting to {a}"))
            }
            Err(e) => last = Fail::Connect(format!("{a}: {e}")),
        }
    }
    let mut s = stream.ok_or(last)?;
    let io = |what: &str, e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Fail::Timeout(format!("{what} {}", ep.url_of(signal)))
        }
        _ => Fail::Io(format!("{what} {}: {e}", ep.url_of(signal))),
    };
    let _ = s.set_nodelay(true);
    let host = if ep.host.contains(':') {
        format!("[{}]", ep.host)
    } else {
        ep.host.clone()
    };
    let head = format!(
        "POST {}{signal} HTTP/1.1\r\nHost: {host}:{}\r\nUser-Agent: mantle/{}\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        ep.prefix,
        ep.port,
        env!("CARGO_PKG_VERSION"),
        body.len()
    );
    s.set_write_timeout(Some(left()?))
        .map_err(|e| io("sending to", e))?;
    s.write_all(head.as_bytes())
        .and_then(|_| s.write_all(body))
        .map_err(|e| io("sending to", e))?;
    // The answer: read to the end (Connection: close) or to the length.
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        s.set_read_timeout(Some(left()?))
            .map_err(|e| io("reading from", e))?;
        let n = s.read(&mut chunk).map_err(|e| io("reading from", e))?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 4 << 20 {
            return Err(Fail::Io(format!(
                "{}: an answer over 4 MiB",
                ep.url_of(signal)
            )));
        }
        if let Some(done) = complete(&buf) {
            buf.truncate(done);
            break;
        }
    }
    let (status, body) = parse_response(&buf)
        .ok_or_else(|| Fail::Io(format!("{}: not an HTTP answer", ep.url_of(signal))))?;
    if (200..300).contains(&status) {
        Ok(body)
    } else {
        Err(Fail::Status(status, error_text(&body)))
    }
}

/// The end of a whole response with a Content-Length, if `b` holds it.
fn complete(b: &[u8]) -> Option<usize> {
    let end = find(b, b"\r\n\r\n")? + 4;
    let len = header(&b[..end], "content-length")?.parse::<usize>().ok()?;
    (b.len() >= end + len).then_some(end + len)
}

fn find(h: &[u8], n: &[u8]) -> Option<usize> {
    h.windows(n.len()).position(|w| w == n)
}

/// A header's value (the first of that name).
fn header(head: &[u8], name: &str) -> Option<String> {
    String::from_utf8_lossy(head).lines().skip(1).find_map(|l| {
        let (k, v) = l.split_once(':')?;
        k.trim()
            .eq_ignore_ascii_case(name)
            .then(|| v.trim().to_string())
    })
}

/// Status and body of a response (chunked or not).
fn parse_response(b: &[u8]) -> Option<(u16, Vec<u8>)> {
    let end = find(b, b"\r\n\r\n")?;
    let head = &b[..end];
    let first =
        String::from_utf8_lossy(&head[..find(head, b"\r\n").unwrap_or(head.len())]).into_owned();
    let mut parts = first.split_whitespace();
    if !parts.next()?.starts_with("HTTP/1.") {
        return None;
    }
    let status = parts.next()?.parse().ok()?;
    let mut body = b[end + 4..].to_vec();
    if header(head, "transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        body = dechunk(&body)?;
    } else if let Some(n) = header(head, "content-length").and_then(|v| v.parse::<usize>().ok()) {
        body.truncate(n);
    }
    Some((status, body))
}

fn dechunk(mut b: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line = find(b, b"\r\n")?;
        let size = std::str::from_utf8(&b[..line]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        b = &b[line + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(b.get(..size)?);
        b = b.get(size + 2..)?;
    }
}

/// What an error answer says, in one short line (OTLP/HTTP puts a
/// google.rpc.Status in it, whose message is readable text; collectors
/// may answer plain text too).
fn error_text(body: &[u8]) -> String {
    let t: String = String::from_utf8_lossy(body)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .filter(|c| *c != '\u{fffd}')
        .collect();
    let t = t.split_whitespace().collect::<Vec<_>>().join(" ");
    t.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let e = Endpoint::parse("http://127.0.0.1:4318").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("127.0.0.1", 4318, "")
        );
        assert_eq!(e.url_of("/v1/traces"), "http://127.0.0.1:4318/v1/traces");
        let e = Endpoint::parse("http://collector/otlp/").unwrap();
        assert_eq!((e.port, e.prefix.as_str()), (80, "/otlp"));
        let e = Endpoint::parse("http://[::1]:4318/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("::1", 4318));
        assert_eq!(e.url_of("/v1/metrics"), "http://[::1]:4318/v1/metrics");
        for bad in [
            "127.0.0.1:4318",
            "https://x:4318",
            "http://:4318",
            "http://x:0",
            "http://x:99999",
            "http://x:",
            "http://u:p@x:1",
            "http://x/a?b",
            "http://x/a b",
            "http://[::1",
        ] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn responses() {
        let r = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabXX";
        assert_eq!(complete(r), Some(r.len() - 2));
        assert_eq!(parse_response(r), Some((200, b"ab".to_vec())));
        let c = b"HTTP/1.1 503 Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x\r\nde\r\n0\r\n\r\n";
        assert_eq!(parse_response(c), Some((503, b"abcde".to_vec())));
        assert_eq!(parse_response(b"SSH-2.0\r\n\r\n"), None);
        assert!(Fail::Status(503, String::new()).retryable());
        assert!(Fail::Status(429, String::new()).retryable());
        assert!(!Fail::Status(400, String::new()).retryable());
        assert!(Fail::Connect(String::new()).retryable());
        assert_eq!(error_text(b"\x0a\x05bad \x01 data"), "bad data");
    }

    /// A port nothing listens on: refused at once, retryable. A listener
    /// that never answers: a timeout within the deadline.
    #[test]
    fn refused_and_silent() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let ep = Endpoint::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let t = Instant::now();
        let e = post(&ep, "/v1/traces", b"x", Duration::from_millis(300)).unwrap_err();
        assert!(matches!(e, Fail::Timeout(_)), "{e:?}");
        assert!(t.elapsed() < Duration::from_secs(5));
        drop(l);
        let e = post(&ep, "/v1/traces", b"x", Duration::from_secs(2)).unwrap_err();
        assert!(matches!(e, Fail::Connect(_)), "{e:?}");
        assert!(e.retryable());
    }
}
