# churn.pl — a Perl workload of hashes and strings (the harness's "perl").
#
# usage: perl churn.pl STEPS POPULATION SEED   (the harness sets PERL_HASH_SEED=0 and
#                                                PERL_PERTURB_KEYS=0: hashes fill the same way)
#
# Keeps a live population of POPULATION records (hashes of strings, arrays and nested
# hashes) and at every step replaces a random one; builds lines with sprintf, join and
# substitutions, splits them back with a regex; keeps a word index (a hash of arrays)
# that grows and is pruned; every so often sorts a snapshot and groups it. A seeded LCG
# drives everything and the output is checksums that depend on no address or hash order,
# so every allocator must print the same lines.
use strict;
use warnings;
use integer;

my $steps = defined $ARGV[0] ? $ARGV[0] : 200000;
my $POPULATION = defined $ARGV[1] ? $ARGV[1] : 4096;
my $seed = defined $ARGV[2] ? $ARGV[2] : 1;

# 64-bit LCG (the constants of churn.lua and churn.py); "use integer" wraps around.
my $state = $seed * 6364136223846793005 + 1442695040888963407;
sub rand_n {
    my ($n) = @_;
    $state = $state * 6364136223846793005 + 1442695040888963407;
    return (($state >> 33) & 0x7fffffff) % $n + 1;
}

my @syllables = qw(ka lo mi ne su ta ri po ze vu an or);
# every word of two and of three syllables (1872 words)
my @vocabulary;
for my $a (@syllables) {
    for my $b (@syllables) {
        push @vocabulary, map { "$a$b$_" } "", @syllables;
    }
}
sub word {
    return $vocabulary[rand_n(scalar @vocabulary) - 1];
}

sub make_record {
    my ($id) = @_;
    my $name = word() . "-" . word();
    my @tags = map { word() } 1 .. rand_n(8);
    my %attrs = map { (word() => rand_n(1000)) } 1 .. rand_n(6);
    my $line = sprintf("%08d %s [%s] %s", $id, $name, join(",", @tags),
                       join(" ", map { "$_=$attrs{$_}" } sort keys %attrs));
    (my $loud = $line) =~ s/([aeiou])([kt])/\U$1\E$2/g;
    return { id => $id, name => $name, tags => \@tags, attrs => \%attrs, line => $line,
             loud => $loud, pos => [rand_n(1000), rand_n(1000)] };
}

sub fnv {
    my ($s, $h) = @_;
    for my $c (unpack "C*", $s) {
        $h = (($h ^ $c) * 16777619) & 0xffffffff;
    }
    return $h;
}

my @live = map { make_record($_) } 0 .. $POPULATION - 1;
my %index;
my ($digest, $made, $weight) = (2166136261, $POPULATION, 0);

for my $step (1 .. $steps) {
    my $slot = rand_n($POPULATION) - 1;
    my $old = $live[$slot];
    my ($id, $name, $tags, $attrs) = $old->{line} =~ /^(\d+) (\S+) \[([^\]]*)\] ?(.*)$/
        or die "FAIL: line of record $old->{id} does not parse\n";
    die "FAIL: record $old->{id} parsed back wrong\n" if $id != $old->{id} || $name ne $old->{name};
    for my $t (split /,/, $tags) {
        push @{ $index{$t} }, $old->{id};
    }
    my %back = map { split /=/ } split / /, $attrs;
    $weight += $_ for values %back;
    $weight += $old->{pos}[0] - $old->{pos}[1];
    $digest = fnv(substr($old->{loud}, 0, 12 + rand_n(16)), $digest);
    $live[$slot] = make_record($POPULATION + $step);
    $made++;

    if ($step % 1000 == 0) {
        # prune the index, then a sorted and grouped snapshot
        for my $k (keys %index) {
            delete $index{$k} if @{ $index{$k} } < 3;
        }
        my @snapshot = sort { $a->{name} cmp $b->{name} || $a->{id} <=> $b->{id} } @live;
        my %groups;
        push @{ $groups{ substr($_->{name}, 0, 2) } }, $_->{id} for @snapshot;
        my $text = join ";", map { "$_:" . scalar(@{ $groups{$_} }) } sort keys %groups;
        $digest = fnv($text, $digest);
    }
}

my $ids = 0;
$ids += $_->{id} for @live;
my @top = (sort { @{ $index{$b} } <=> @{ $index{$a} } || $a cmp $b } keys %index)[0 .. 2];
printf "steps=%d made=%d\n", $steps, $made;
printf "weight=%d digest=%08x\n", $weight, $digest;
printf "index=%d top=%s\n", scalar(keys %index),
    join(",", map { defined $_ ? "$_:" . scalar(@{ $index{$_} }) : "-" } @top);
printf "live ids sum=%d\n", $ids;
