//! A destination for sandboxes held to an outbound policy: an HTTP and a TLS server in a
//! container on a Docker network of its own, so that it is neither loopback nor one of the
//! host's addresses (which the egress proxy never reaches), named through the proxy's resolver
//! (`HALYARD_EGRESS_RESOLVE`). Used by the egress tests and the browser's Network tab.

use crate::docker::docker;

/// A server of `registry-http` (port 8080) and `registry-tls` (8443, a certificate for
/// `registry.test` and `api.corp.test`) in a container on a network of its own.
pub struct Registry {
    name: String,
    network: String,
    /// Its address on its network (reached from the host, which is where the proxy is).
    pub ip: String,
    /// Its certificate (PEM), for a client to trust.
    pub cert: String,
    _dir: tempfile::TempDir,
}

const SERVER: &str = r#"
import http.server, ssl, threading
class H(http.server.BaseHTTPRequestHandler):
    def reply(self):
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        body = (self.server.tag + " " + self.command + " " + self.path).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = reply
    def log_message(self, *a):
        pass
plain = http.server.ThreadingHTTPServer(("0.0.0.0", 8080), H)
plain.tag = "registry-http"
tls = http.server.ThreadingHTTPServer(("0.0.0.0", 8443), H)
tls.tag = "registry-tls"
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain("/srv/cert.pem", "/srv/key.pem")
tls.socket = ctx.wrap_socket(tls.socket, server_side=True)
threading.Thread(target=tls.serve_forever, daemon=True).start()
plain.serve_forever()
"#;

impl Registry {
    /// Starts it (a container of the base image, `halyard-base:bookworm`) and waits until it answers.
    pub fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("server.py"), SERVER).unwrap();
        let out = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=registry.test"])
            .args(["-addext", "subjectAltName=DNS:registry.test,DNS:api.corp.test"])
            .arg("-keyout")
            .arg(dir.path().join("key.pem"))
            .arg("-out")
            .arg(dir.path().join("cert.pem"))
            .output()
            .expect("openssl");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        for f in ["server.py", "cert.pem", "key.pem"] {
            let p = dir.path().join(f);
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        }
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..10].to_owned();
        let (name, network) = (format!("halyard-egress-registry-{suffix}"), format!("halyard-egress-test-{suffix}"));
        docker(&["network", "create", &network]);
        let mount = format!("{}:/srv:ro", dir.path().display());
        docker(&["run", "-d", "--name", &name, "--network", &network, "-v", &mount, "halyard-base:bookworm", "python3", "/srv/server.py"]);
        let ip = docker(&["inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", &name]);
        let cert = std::fs::read_to_string(dir.path().join("cert.pem")).unwrap();
        // Up when it answers from the host (which is where the proxy connects from).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect((ip.as_str(), 8080)).is_err() {
            assert!(std::time::Instant::now() < deadline, "the registry did not start: {}", docker(&["logs", &name]));
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        Self { name, network, ip, cert, _dir: dir }
    }

    /// `HALYARD_EGRESS_RESOLVE`: every test name at the registry, and one at loopback.
    pub fn resolve(&self) -> String {
        let names = ["registry.test", "other.test", "api.corp.test", "x.bad.corp.test"];
        let mut pairs: Vec<String> = names.iter().map(|n| format!("{n}={}", self.ip)).collect();
        pairs.push("loop.test=127.0.0.1".into());
        pairs.join(",")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = std::process::Command::new("docker").args(["rm", "-f", &self.name]).output();
        let _ = std::process::Command::new("docker").args(["network", "rm", &self.network]).output();
    }
}
