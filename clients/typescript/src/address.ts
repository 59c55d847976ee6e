/**
 * Where the sidecar is: the address given, else the SAFEWRITE_ADDRESS environment
 * variable, else the sidecar's default, as a gRPC target for grpc-js.
 */

/** The environment variable that says where the sidecar listens. */
export const ADDRESS_ENV = "SAFEWRITE_ADDRESS";

/** Where the sidecar listens unless told otherwise (`safewrite serve --listen`). */
export const DEFAULT_ADDRESS = "127.0.0.1:50051";

/**
 * The grpc-js target for an address: `host:port`, `http://host:port`, `unix:///path`
 * or a bare absolute socket path. An empty or missing address takes SAFEWRITE_ADDRESS,
 * else {@link DEFAULT_ADDRESS}, as the Python and Go clients do.
 *
 * @throws Error when the address is not one of those forms.
 */
export function resolveAddress(address: string | undefined, env: NodeJS.ProcessEnv = process.env): string {
  const given = (address ?? "").trim() || (env[ADDRESS_ENV] ?? "").trim() || DEFAULT_ADDRESS;
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
