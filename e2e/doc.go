// Package e2e holds the black-box tests of the coordinator: the built binary run as a
// process against a PostgreSQL cluster that each test owns, driven through the generated
// client and raw HTTP, with processes killed and the database crashed under load. The
// process harness is in e2e/harness; what each fault asserts is in the README's "Crash safety" section.
package e2e
