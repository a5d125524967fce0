module github.com/splitlet/splitlet/bench

go 1.26

require github.com/splitlet/splitlet/libs v0.0.0

replace github.com/splitlet/splitlet/libs => ../libs
