// Package coordinatorclient is the Go client of the coordinator: the generated HTTP client
// (client.gen.go, from openapi.yaml) and helpers for participants.
package coordinatorclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../openapi.yaml
