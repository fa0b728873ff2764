// Package model holds the Promela model of the coordinator's protocol (coordinator.pml)
// and the test that has Spin verify each of its properties and refute each without its
// guard. README.md in this directory maps the properties to the rules and the code.
package model
