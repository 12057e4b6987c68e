method SumTwos(n: nat) returns (s: nat)
  ensures s == 2 * n
{
  s := 0;
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant s == 2 * i
  {
    i := i + 1;
    s := s + 2;
  }
}
