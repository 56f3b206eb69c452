// Preloaded into Continue CLI by continue.yaml (NODE_OPTIONS=--import): the
// one connection it makes that no setting turns off, the update check
// `fetch("https://api.continue.dev/cn/info?id=<machine id>")` run when the
// version module loads (src/version.ts:42, dist/index.js:3778), and any
// other connection to a host that is not loopback, fail here before a
// socket is opened. Provider and MCP traffic goes to chaosrun on 127.0.0.1.
import net from "node:net";

const connect = net.Socket.prototype.connect;
const loopback = (host) =>
  host === undefined || host === "" || host === "localhost" || host === "::1" || /^127\./.test(host);

net.Socket.prototype.connect = function (...args) {
  let options = args[0];
  if (Array.isArray(options)) options = options[0]; // net.connect's normalized arguments
  let host;
  if (options !== null && typeof options === "object") {
    if (options.path) return connect.apply(this, args); // a Unix socket
    host = options.host;
  } else if (typeof options === "string" && !/^\d+$/.test(options)) {
    return connect.apply(this, args); // a Unix socket path
  } else if (typeof args[1] === "string") {
    host = args[1];
  }
  if (loopback(host)) return connect.apply(this, args);
  const error = new Error(`chaosrun offline.mjs: connection to ${host} refused (not loopback)`);
  error.code = "ECONNREFUSED";
  process.nextTick(() => this.destroy(error));
  return this;
};
