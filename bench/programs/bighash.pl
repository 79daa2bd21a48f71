# bighash.pl — a multi-million-entry hash read at random keys (a large-heap program).
#
# usage: perl bighash.pl KEYS LOOKUPS SEED   (the harness sets PERL_HASH_SEED=0 and
#                                             PERL_PERTURB_KEYS=0)
#
# Builds a hash of KEYS string keys ("key:<i>") to string values of 4..40 characters,
# then makes LOOKUPS look-ups of keys drawn by a seeded LCG (the generator of churn.pl),
# one in sixteen of them rewriting the value; the heap is hundreds of MiB of small
# blocks spread by the random keys over all of it. The output is counts and checksums
# that depend on no address or hash order, so every allocator must print the same lines.
use strict;
use warnings;
use integer;

my $keys = defined $ARGV[0] ? $ARGV[0] : 3000000;
my $lookups = defined $ARGV[1] ? $ARGV[1] : 6000000;
my $seed = defined $ARGV[2] ? $ARGV[2] : 1;
my @alphabet = split //, "abcdefghijklmnopqrstuvwxyz0123456789";

my $state = $seed * 6364136223846793005 + 1442695040888963407;
my %table;
for my $i (0 .. $keys - 1) {
    $state = $state * 6364136223846793005 + 1442695040888963407;
    my $r = ($state >> 33) & 0x7fffffff;
    $table{"key:$i"} = $alphabet[$r % 36] x (4 + $r % 37);
}
my ($total, $rewritten) = (0, 0);
for (1 .. $lookups) {
    $state = $state * 6364136223846793005 + 1442695040888963407;
    my $r = ($state >> 33) & 0x7fffffff;
    my $key = "key:" . ($r % $keys);
    my $value = $table{$key};
    $total += length($value) + ord($value);
    if (($r & 15) == 0) {
        $table{$key} = length($value) > 4 ? substr($value, 1) . substr($value, 0, 1) : $value . "x";
        $rewritten++;
    }
}
printf "keys=%d lookups=%d\n", scalar(keys %table), $lookups;
printf "checksum=%d rewritten=%d\n", $total, $rewritten;
printf "last=%s\n", $table{"key:" . ($keys - 1)};
