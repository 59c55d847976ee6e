/**
 * Where the sidecar is: the address given, else the SAFEWRITE_ADDRESS environment
 * variable, as a gRPC target for grpc-js.
 */

/** The environment variable that says where the sidecar listens. */
export const ADDRESS_ENV = "SAFEWRITE_ADDRESS";

/**
 * The grpc-js target for an address: `host:port`, `http://host:port`, `unix:///path`
 * or a bare absolute socket path. An empty or missing address takes SAFEWRITE_ADDRESS.
 *
 * @throws Error when neither an address nor SAFEWRITE_ADDRESS is given.
 */
export function resolveAddress(address: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const given = (address ?? "").trim() || (env[ADDRESS_ENV] ?? "").trim();
  if (given === "") {
    throw new Error(
      `no safewrite sidecar address: pass one to new Client(address) or set ${ADDRESS_ENV} ` +
        `(e.g. 127.0.0.1:50051 or unix:///run/safewrite/safewrite.sock)`,
    );
  }
  if (given.startsWith("unix:")) {
    return given;
  }
  if (given.startsWith("/")) {
    return `unix://${given}`;
  }
  const plain = given.replace(/^https?:\/\//, "").replace(/\/+$/, "");
  if (plain === "" || plain.includes("/")) {
    throw new Error(`not a sidecar address: ${JSON.stringify(given)} (want host:port or unix:///path)`);
  }
  return plain;
}
