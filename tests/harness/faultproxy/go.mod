module safewrite.dev/tests/harness/faultproxy

go 1.24
