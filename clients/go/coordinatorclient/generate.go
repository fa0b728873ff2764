package coordinatorclient

// client.gen.go is generated from openapi.yaml with the options in oapi-codegen.yaml.
// The package documentation is in doc.go.

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../../openapi.yaml
