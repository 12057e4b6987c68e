method Count(n: nat) returns (c: nat)
  ensures c == n
{
  c := 0;
  var i := 0;
  while i < n
    invariant 0 <= i <= n
    invariant c == i
  {
    i := i + 1;
    c := c + 2;
  }
  c := i;
}
