// cellkit's io_uring package: a module of its own, so that the gnet fork
// (third_party/gnet, module github.com/panjf2000/gnet/v2) can import it
// under cellkit's path without depending on the main module. Its
// golang.org/x/sys is the fork's, so requiring it changes nothing else in
// the fork's build list.
module github.com/cellkit/cellkit/third_party/uring

go 1.20

require golang.org/x/sys v0.30.0
