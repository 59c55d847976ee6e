# Converts the image's CycloneDX SBOM (cargo-cyclonedx's JSON) to SPDX 2.3 JSON, for
# consumers that read only SPDX. deploy/image/build.sh runs it:
#   jq -f deploy/image/cdx-to-spdx.jq --arg created TIME --arg digest sha256:... BOM.cdx.json
# Same packages, licences (as declared by each crate), purls, SHA-256 checksums (from
# Cargo.lock) and dependency edges as the CycloneDX file; nothing is looked up anew.

def spdxid: "SPDXRef-Package-" + gsub("[^A-Za-z0-9.-]"; "-");
def license_of:
  if (.licenses // []) | length == 0 then "NOASSERTION"
  elif .licenses[0].expression then .licenses[0].expression
  elif .licenses[0].license.id then ([.licenses[].license.id // empty] | join(" AND "))
  else "NOASSERTION"
  end;
def package:
  {
    SPDXID: (."bom-ref" | spdxid),
    name: .name,
    versionInfo: (.version // "NOASSERTION"),
    downloadLocation: "NOASSERTION",
    filesAnalyzed: false,
    licenseConcluded: "NOASSERTION",
    licenseDeclared: license_of,
    copyrightText: "NOASSERTION",
    checksums: [(.hashes // [])[] | select(.alg == "SHA-256") | {algorithm: "SHA256", checksumValue: .content}],
    externalRefs: [if .purl then {referenceCategory: "PACKAGE-MANAGER", referenceType: "purl", referenceLocator: .purl} else empty end]
  };

. as $bom
| ($bom.metadata.component) as $root
| {
    spdxVersion: "SPDX-2.3",
    dataLicense: "CC0-1.0",
    SPDXID: "SPDXRef-DOCUMENT",
    name: ("safewrite-image-" + $digest),
    documentNamespace: ("urn:safewrite:sbom:" + $digest),
    creationInfo: {
      created: $created,
      creators: ["Tool: cargo-cyclonedx", "Tool: deploy/image/cdx-to-spdx.jq"]
    },
    packages: ([$root | package] + [($bom.components // [])[] | package]),
    relationships: (
      [{spdxElementId: "SPDXRef-DOCUMENT", relationshipType: "DESCRIBES", relatedSpdxElement: ($root."bom-ref" | spdxid)}]
      + [($bom.dependencies // [])[] as $d | ($d.dependsOn // [])[]
          | {spdxElementId: ($d.ref | spdxid), relationshipType: "DEPENDS_ON", relatedSpdxElement: (. | spdxid)}]
    )
  }
