// The stand-in bcd of the kind test bed (see main.go): the standard library only, so it builds
// without the module proxy.
module bcd-ansible/sandbox/kind/bcd

go 1.22
