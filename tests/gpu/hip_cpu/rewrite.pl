#!/usr/bin/perl
# Rewrites one src/gpu/*.cu file into C++ that HIP-CPU compiles with an ordinary compiler
# (tests/gpu/hip_cpu/README.md).   rewrite.pl FILE.cu OUT.cpp
#
#  - A launch `kernel<<<grid, block, shmem, stream>>>(args)` (a template kernel too, over any
#    number of lines; an argument may hold commas inside parentheses, as rows_grid(N, "op") does)
#    becomes `hipLaunchKernelGGL(kernel, grid, block, shmem, stream, args)`: no C++ compiler has
#    triple chevrons. Every launch in src/gpu/ passes all four configuration arguments.
#  - runtime.cu: HIP-CPU's device properties have no gcnArchName, report the CPU's SIMD width as
#    the warp size (8 with AVX-512) while its shuffles and ballots work on warpSize = 64 lanes,
#    and its stream-creation flags are an enum rather than an unsigned.
# Exits non-zero when a launch is left over or an expected line of runtime.cu is not found, so a
# change in the sources fails the build instead of compiling something else.
use strict;
use warnings;

my ($path, $out_path) = @ARGV;
die "usage: rewrite.pl FILE.cu OUT.cpp\n" unless defined $out_path;
open(my $in, '<', $path) or die "$path: $!\n";
my $text = do { local $/; <$in> };
close($in);

# Splits a launch configuration at its top-level commas (not those inside parentheses).
sub split_top {
  my ($s) = @_;
  my (@parts, $depth, $cur);
  ($depth, $cur) = (0, '');
  for my $c (split //, $s) {
    $depth++ if $c eq '(';
    $depth-- if $c eq ')';
    if ($c eq ',' && $depth == 0) { push @parts, $cur; $cur = ''; next; }
    $cur .= $c;
  }
  push @parts, $cur;
  s/^\s+|\s+$//g for @parts;
  return @parts;
}

$text =~ s{([A-Za-z_]\w*(?:<(?:(?!<<<)[^;{}])*?>)?)<<<(.*?)>>>\(}{
  my ($kernel, $config) = ($1, $2);
  my @c = split_top($config);
  die "$path: launch of $kernel has " . scalar(@c) . " configuration arguments, not 4\n" if @c != 4;
  my $lines = () = $config =~ /\n/g;  # kept, so that #line below stays true
  "hipLaunchKernelGGL($kernel, " . join(', ', @c) . ', ' . ("\n" x $lines)
}gse;
die "$path: a launch the rewrite missed\n" if $text =~ /<<</;

if ($path =~ m{(^|/)runtime\.cu$}) {
  $text =~ s/d\.arch = prop\.gcnArchName;/d.arch = "hip-cpu";/ or die "$path: no gcnArchName line\n";
  $text =~ s/d\.warp_size = prop\.warpSize;/d.warp_size = warpSize;/ or die "$path: no warpSize line\n";
  $text =~ s/gpuStreamCreateWithFlags\(&s, gpuStreamNonBlocking\)/gpuStreamCreateWithFlags(&s, static_cast<hipStreamFlags>(gpuStreamNonBlocking))/
    or die "$path: no gpuStreamCreateWithFlags line\n";
}
open(my $out, '>', $out_path) or die "$out_path: $!\n";
print $out "#line 1 \"$path\"\n", $text;
close($out) or die "$out_path: $!\n";
