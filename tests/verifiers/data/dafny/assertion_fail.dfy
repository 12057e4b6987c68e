method Check(x: int)
  requires x > 3
{
  assert x > 5;
}
