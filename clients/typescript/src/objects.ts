/**
 * Kubernetes objects in @kubernetes/client-node's types: {@link ObjectRef} (a call's
 * target), {@link Stored} (what a call returns), {@link refOf} (the target of any
 * client-node object), {@link JsonObject} (a patch, an object to create), and the conversion of
 * the sidecar's JSON into the shape client-node gives (its date-times as `Date`s) and
 * back.
 *
 * client-node is a peer dependency, loaded once on first use ({@link loadClientNode}):
 * its model classes' attribute maps say which fields of a built-in kind are date-times.
 * Every other field is kept as the API server wrote it, fields client-node does not know
 * included, so an object read and written back loses nothing.
 */
import type { KubernetesObject, V1ObjectMeta } from "@kubernetes/client-node";

/** Names one Kubernetes object. */
export interface ObjectRef {
  /** e.g. "v1", "apps/v1", "example.com/v1alpha1". */
  apiVersion: string;
  /** e.g. "ConfigMap"; resolved to a resource through API discovery. */
  kind: string;
  /** Required for namespaced kinds, empty or absent for cluster-scoped ones. */
  namespace?: string;
  name: string;
}

/** A JSON object: a patch, an apply configuration, an object to create. */
export type JsonObject = { [key: string]: unknown };

/**
 * An object as the API server stores it: `T` (client-node's `V1ConfigMap`, your own
 * `KubernetesObject & { spec: ... }`), with `apiVersion`, `kind` and `metadata` present.
 * Assignable to `T`, so it goes wherever client-node takes a `T`.
 */
export type Stored<T extends KubernetesObject = KubernetesObject> = T & {
  apiVersion: string;
  kind: string;
  metadata: V1ObjectMeta;
};

/** The type of an object whose items come without it, as in a client-node list. */
export interface TypeMeta {
  apiVersion: string;
  kind: string;
}

/**
 * The {@link ObjectRef} of a client-node object: its `apiVersion`, `kind`,
 * `metadata.namespace` and `metadata.name`. The items of a client-node list carry no
 * `apiVersion` and `kind` (nor, then, those an informer's cache got from its list): give
 * them as `type`, which wins over the object's own.
 *
 * @throws TypeError when the object has no name, or no apiVersion or kind and `type`
 *   gives none.
 */
export function refOf(object: KubernetesObject, type?: TypeMeta): ObjectRef {
  if (object === null || typeof object !== "object") {
    throw new TypeError(`refOf: not a Kubernetes object: ${String(object)}`);
  }
  const apiVersion = type?.apiVersion ?? object.apiVersion;
  const kind = type?.kind ?? object.kind;
  if (typeof apiVersion !== "string" || apiVersion === "" || typeof kind !== "string" || kind === "") {
    throw new TypeError(
      "refOf: the object has no apiVersion or kind (the items of a client-node list carry neither): " +
        'give them, e.g. refOf(item, { apiVersion: "v1", kind: "ConfigMap" })',
    );
  }
  const name = object.metadata?.name;
  if (typeof name !== "string" || name === "") {
    throw new TypeError("refOf: the object has no metadata.name");
  }
  const namespace = object.metadata?.namespace;
  return namespace ? { apiVersion, kind, namespace, name } : { apiVersion, kind, name };
}

/** One field of a client-node model class, as its `getAttributeTypeMap()` lists it. */
interface Attribute {
  name: string;
  baseName: string;
  type: string;
}

/** A client-node model class: `V1ConfigMap`, `V1ObjectMeta`, ... */
interface Model {
  getAttributeTypeMap(): Attribute[];
}

type Models = Record<string, unknown>;

let models: Models | undefined;
let loading: Promise<void> | undefined;

/**
 * Loads @kubernetes/client-node once (a controller has loaded it already: then this is
 * free). Never rejects: without the package, objects stay as the API server wrote them
 * (date-times as RFC 3339 strings).
 */
export function loadClientNode(): Promise<void> {
  loading ??= import("@kubernetes/client-node").then(
    (module) => {
      models = module as unknown as Models;
    },
    () => undefined,
  );
  return loading;
}

/** The client-node model class named `name`, if there is one. */
function model(name: string): Model | undefined {
  const candidate = models?.[name] as Partial<Model> | undefined;
  return typeof candidate?.getAttributeTypeMap === "function" ? (candidate as Model) : undefined;
}

/**
 * The model of a kind: `${Version}${Kind}` (`V1ConfigMap`, `V1Deployment`) for the
 * built-in groups (none, dot-less, `*.k8s.io`), as client-node names them; a custom
 * resource's group has a dot, and only its metadata has a model.
 */
function kindModel(apiVersion: unknown, kind: unknown): Model | undefined {
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    return undefined;
  }
  const slash = apiVersion.lastIndexOf("/");
  const group = slash < 0 ? "" : apiVersion.slice(0, slash);
  const version = apiVersion.slice(slash + 1);
  if (group.includes(".") && !group.endsWith(".k8s.io")) {
    return undefined;
  }
  return model(`${version.charAt(0).toUpperCase()}${version.slice(1)}${kind}`);
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  value !== null && typeof value === "object" && !Array.isArray(value);

/** `value` with the date-times of `type` (a client-node attribute type) as Dates. */
function revive(value: unknown, type: string): unknown {
  if (value === null || value === undefined) {
    return value;
  }
  if (type === "Date") {
    if (typeof value !== "string") {
      return value;
    }
    const date = new Date(value);
    return Number.isNaN(date.getTime()) ? value : date;
  }
  if (type.startsWith("Array<") && type.endsWith(">")) {
    const item = type.slice("Array<".length, -1);
    return Array.isArray(value) ? value.map((v) => revive(v, item)) : value;
  }
  const map = /^\{ \[key: string\]: (.*); \}$/.exec(type);
  if (map !== null) {
    return isRecord(value) ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, revive(v, map[1]!)])) : value;
  }
  const found = model(type);
  return found === undefined || !isRecord(value) ? value : reviveFields(value, found);
}

/** The object's fields, those of `found` revived, every other as it is. */
function reviveFields(value: Record<string, unknown>, found: Model): Record<string, unknown> {
  const out: Record<string, unknown> = { ...value };
  for (const attribute of found.getAttributeTypeMap()) {
    if (attribute.baseName in value) {
      out[attribute.baseName] = revive(value[attribute.baseName], attribute.type);
    }
  }
  return out;
}

/**
 * An object of the sidecar's (its JSON text) in client-node's shape: the date-times its
 * model declares (every kind's `metadata`; a built-in kind's other fields) as Dates,
 * when client-node is loaded. Empty text is `{}`.
 */
export function parseObject<T extends KubernetesObject = KubernetesObject>(json: string): Stored<T> {
  if (json === "") {
    return {} as Stored<T>;
  }
  const parsed: unknown = JSON.parse(json);
  if (models === undefined || !isRecord(parsed)) {
    return parsed as Stored<T>;
  }
  const found = kindModel(parsed["apiVersion"], parsed["kind"]);
  const revived =
    found !== undefined
      ? reviveFields(parsed, found)
      : "metadata" in parsed
        ? { ...parsed, metadata: revive(parsed["metadata"], "V1ObjectMeta") }
        : parsed;
  return revived as unknown as Stored<T>;
}

/**
 * `value` as JSON text: a Date (client-node's date-times) as RFC 3339 in UTC, in whole
 * seconds when it has no milliseconds (as metav1.Time writes it, so an object read and
 * written back unchanged is the same text), else with them.
 */
export function toJson(value: unknown): string | undefined {
  return JSON.stringify(value, function (this: Record<string, unknown>, key: string, converted: unknown) {
    const raw = this[key];
    if (raw instanceof Date && !Number.isNaN(raw.getTime())) {
      const iso = raw.toISOString();
      return raw.getUTCMilliseconds() === 0 ? iso.replace(/\.000Z$/, "Z") : iso;
    }
    return converted;
  });
}
